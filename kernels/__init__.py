"""Compute kernels: pure functions over arrays (cpu/) and CUDA sources (cuda/).
Kernels know nothing about blobs, nets or protobufs."""

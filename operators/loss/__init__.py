"""Losses and evaluation metrics, with their gradients."""

"""Collective communication (Gloo through torch.distributed) and key-value stores."""

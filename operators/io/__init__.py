"""Persistence (Save/Load/Checkpoint, DBs), data readers, datasets and queues."""

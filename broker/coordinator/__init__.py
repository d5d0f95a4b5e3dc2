"""The group coordinator: consumer groups and committed offsets (see service.py)."""

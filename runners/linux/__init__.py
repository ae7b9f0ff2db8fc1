"""Support shared by the Linux runners (Landlock and bubblewrap)."""

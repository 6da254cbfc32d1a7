"""Tests written as a user's script: the library in TFF's own program loop."""

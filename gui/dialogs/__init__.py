"""Dialogs opened from the menus: Share a GPU, About."""

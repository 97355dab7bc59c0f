"""The window's shell: the main window, its layout, status bar, controller (the GUI-thread hop) and app start."""

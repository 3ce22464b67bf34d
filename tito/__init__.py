"""tito: the command line that runs the TinyTorch course."""

__version__ = "0.1.0"

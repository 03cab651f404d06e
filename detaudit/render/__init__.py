"""Rendering: results in, English (rich), JSON and plots out. One module per result; nothing here
runs anything or decides a verdict. The same result renders to the same bytes."""

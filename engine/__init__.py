"""klake engine package."""

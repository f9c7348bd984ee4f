"""klake layouts package."""

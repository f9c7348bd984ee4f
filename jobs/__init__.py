"""klake jobs package."""

"""klake kernel: the names, errors and clocks every other package shares; it imports nothing of klake."""

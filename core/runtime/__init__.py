"""Running compiled programs: the Executable, input checking, reports."""

"""autograd_bridge: makes a compiled segment one node of the eager tape (built in issue 3)."""

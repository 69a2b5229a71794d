"""`xferscope batch`: many small copies, and which way of making them wins where."""

"""Integrations of the runtime API with the frameworks whose data it moves, one module per
framework (PyTorch first), each imported only when a program asks for it, so that importing
xferscope never imports a framework. An integration takes the framework's own objects and
words (a DataLoader, a tensor's stream, `non_blocking`) and moves their bytes through
transfer.copy; it keeps no copy logic of its own."""

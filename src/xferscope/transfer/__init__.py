"""What a user's program calls to move data between host memory and a GPU: the runtime API.

- copy.py: `copy_many` (many pieces at once), `copy_one` (under `copy_to_device` and
  `copy_to_host`), `decide`, and each engine's copies (xferscope._engine.Copies: read, decide,
  copy; the one cache of decisions).
- policy.py: which method a batch gets (`choose`, `Choice`, `Shape`, `CopyRefused`), from
  calibration.py (what `xferscope batch --calibrate` stored, a batch_document.py document) or
  rule.py (the built-in rule).
- buffers.py: the caller's objects read as addresses and sizes, where the native reader
  (bindings/resolve.cpp) leaves them.
- staged.py: the staged copy of pageable memory (`StagedCopier`, `copy_to_device`,
  `copy_to_host`).
- moving.py: `to_device`, `to_host`, `warmup`, `release`: whole structures in one call, over
  structure_copies.py (each leaf's destination made by its framework's adapter, the pairs
  handed to a copy) and streams.py (the caller's stream, for `non_blocking`).
- first.py: what `xferscope` gives of these: a process's first calls go PyTorch's way
  (plain.py) while setting_up.py sets the rest up on another thread.
- loading/: `xferscope.load`, checkpoints (safetensors, torch.save's zip) read into GPU memory.
- engine.py: the engine these run on (native unless `use_engine` sets another).
- frameworks/: integrations with PyTorch and other frameworks, imported only when asked for.

The measuring commands (`xferscope batch`, `xferscope pageable`) import this package; it never
imports them. Importing it loads neither NumPy nor the native engine: its modules do, when a
program imports them (`xferscope.copy_many` and the rest are imported on first use)."""

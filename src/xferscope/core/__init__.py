"""What every command stands on: the engines (native and simulated), the machine, signals,
units, statistics, NetPIPE planning and errors."""

"""The run around the algorithm: the device and process setup, defaults sized to the machine,
checkpoints and exact resume, TensorBoard logs, Ctrl-C and stop handling, torchrun's process group."""

"""What machine this process runs on: CPU class and usable cores (`hardware`), the control group's
CPU and memory limits (`cgroup`), host memory and the allocator (`host_memory`), and a capped CPU
class's own inductor cache (`inductor_cache`).

One place that the simulator, the trainer, the benchmarks and the placement library all read; it
only reads, except `host_memory.retain_freed_memory`, which entry points call, and
`inductor_cache.use_class_cache`, which whatever compiles for the CPU calls first.
"""

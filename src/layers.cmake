# The layers of src/ and the layers each may use (docs/design.md, "Layers"),
# read by the build and by scripts/check_layers.cmake (the functions are in
# cmake/lms_layers.cmake). A layer's target compiles against an include root
# holding only its own headers and those of the layers it reaches through
# DEPS; its target_link_libraries may name only those layers' targets. Every
# layer sees include/lms, so PUBLIC_HEADERS says which layer each public
# header belongs to, and the check holds includes of them to the same DEPS.
lms_declare_layer(common PUBLIC_HEADERS checked.h op_kind.h status.h strings.h types.h units.h)
# The op schema: one check per op of an op instance (attributes, arity,
# dtypes, shapes), which the graph's shape inference and both backends call.
lms_declare_layer(op_schema DEPS common)
lms_declare_layer(graph DEPS op_schema common PUBLIC_HEADERS autocast.h graph.h loss.h ops.h training.h)
lms_declare_layer(allocator DEPS common PUBLIC_HEADERS memory_stats.h)
lms_declare_layer(profiler DEPS common PUBLIC_HEADERS profiler.h profiler/)
# The device interface and the code both backends share; each backend sees
# it and not the other backend.
lms_declare_layer(backend DEPS op_schema allocator profiler common PUBLIC_HEADERS device.h)
lms_declare_layer(backend/cpu DEPS backend)
lms_declare_layer(backend/cuda DEPS backend)
# swap replays placements on a BfcAllocator (the one sideways dependency).
lms_declare_layer(swap DEPS graph allocator common PUBLIC_HEADERS config.h plan.h)
# The NCCL engine runs on the CUDA device's streams.
lms_declare_layer(distributed DEPS backend backend/cuda common PUBLIC_HEADERS distributed.h)
# The runtime lowers graphs for the CPU device by that backend's rule
# (backend/cpu/blocked_layout.h); it reaches no other backend header.
lms_declare_layer(runtime DEPS graph swap backend backend/cpu distributed allocator profiler common
                  PUBLIC_HEADERS facts.h profile.h rewrite.h session.h)
lms_declare_layer(io DEPS common PUBLIC_HEADERS io/)
# The ONNX importer builds graphs through the public builders; it knows no
# device, planner or session.
lms_declare_layer(onnx DEPS graph common PUBLIC_HEADERS onnx.h)

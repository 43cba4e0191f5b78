// Linked into the MPI test programs of AddressSanitizer builds. OpenMPI's
// libraries have no frame pointers, so ASan's default fast unwinder records
// one frame of an allocation made inside them, often in a component that
// MPI_Finalize has since dlclose()d: the leak report names no module, and
// the OpenMPI suppressions in tests/lsan.supp cannot match it. The slow
// unwinder records the whole stack (MPI_Init_thread, libmpi.so, ...).
extern "C" const char* __asan_default_options() { return "fast_unwind_on_malloc=0"; }

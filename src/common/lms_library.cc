// liblms is the union of the layer libraries (src/CMakeLists.txt); a shared
// library target needs at least one source of its own.
namespace lms {
extern const char kLibraryName[];
const char kLibraryName[] = "lms";
}  // namespace lms

// Compiles tests/test_pch.h once (lms_test_pch, an empty GoogleTest program
// that is never run); the test programs reuse the precompiled header.

// The layer-check executables (tests/layers/CMakeLists.txt) link a layer's
// objects with only the layers below it; linking is the check, so main does
// nothing.
int main() { return 0; }

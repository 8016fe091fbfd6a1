/* gbtest-rt12 / gbtest-rt13: the runtime tests in an executable linked directly
 * against libcudart, as PyTorch's libraries are. */
int gbtests_main(int argc, char **argv);
int main(int argc, char **argv) { return gbtests_main(argc, argv); }

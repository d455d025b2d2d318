// ext_marked is declare target here; ext_plain is not (so its device code is never built).
#pragma omp declare target
int ext_marked(int x) { return x + 41; }
#pragma omp end declare target

int ext_plain(int x) { return x * 2; }

#include <stdio.h>
#include <stdlib.h>
#include <time.h>
__attribute__((noinline)) long work(long n) { long s = 0; for (long i = 0; i < n; i++) s += i * i % 7; return s; }
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1;
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    long r = work(n);
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%ld %ld\n", r, (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec));
    return 0;
}

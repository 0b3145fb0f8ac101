/* The bundled demo target for `argstash demo`: the seed example
 * main -> foo(5) -> bar(foo_arg + 23), built at -O2 without debug info.
 * bar sleeps, so a backtrace taken at any moment most likely finds
 * main -> foo -> bar -> nanosleep on the stack. The program checks every result. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile int sink;

__attribute__((noinline)) int bar(int bar_arg) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    sink = bar_arg;
    return bar_arg * 2;
}

__attribute__((noinline)) int foo(int foo_arg) {
    return bar(foo_arg + 23) + 1;
}

int main(void) {
    printf("ready %d\n", (int)getpid());
    fflush(stdout);
    for (unsigned long i = 0;; i++) {
        int r = foo(5);
        if (r != 57) {
            fprintf(stderr, "WRONG result %d at iteration %lu\n", r, i);
            abort();
        }
    }
}

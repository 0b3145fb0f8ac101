/* The crash example of README.md and docs/guide/crash-reports.md:
 * parse_record(7, ...) writes through a null pointer.
 *   cc -O2 -o parse docs/examples/parse.c && argstash run --func parse_record -- ./parse 7 16 */
#include <stdio.h>
#include <stdlib.h>

static int *volatile table;

__attribute__((noinline)) int parse_record(long id, long len) {
    if (id == 7)
        table[len] = 1; /* table is NULL: SIGSEGV */
    return (int)(id + len);
}

int main(int argc, char **argv) {
    long id = argc > 1 ? atol(argv[1]) : 1;
    long len = argc > 2 ? atol(argv[2]) : 1;
    printf("parse_record(%ld, %ld)\n", id, len);
    fflush(stdout);
    return parse_record(id, len) == 0;
}

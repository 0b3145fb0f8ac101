/*
 * The GDB JIT interface, loaded into a target by argstash (dlopen) so that gdb,
 * when it attaches, finds `__jit_debug_descriptor` and reads the in-memory symbol
 * files argstash links into it (one per hook: symbols and .eh_frame of the
 * trampoline and relocated prologue). Built by injector/build.rs with
 * -nostdlib: no relocations, no constructors, nothing runs when it is loaded.
 * argstash stores the dlopen handle and dlclose's address here for eject.
 */
struct jit_code_entry;
struct jit_descriptor {
    unsigned int version;
    unsigned int action_flag;
    struct jit_code_entry *relevant_entry;
    struct jit_code_entry *first_entry;
};
__attribute__((noinline, used, visibility("default"))) void __jit_debug_register_code(void)
{
    __asm__ volatile("" ::: "memory");
}
__attribute__((used, visibility("default"))) struct jit_descriptor __jit_debug_descriptor = {1, 0, 0, 0};
__attribute__((used, visibility("default"))) unsigned long argstash_jit_handle;
__attribute__((used, visibility("default"))) unsigned long argstash_jit_dlclose;

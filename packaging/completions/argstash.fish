# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_argstash_global_optspecs
    string join \n bus= h/help V/version
end

function __fish_argstash_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_argstash_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_argstash_using_subcommand
    set -l cmd (__fish_argstash_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c argstash -n "__fish_argstash_needs_command" -l bus -d 'Send the subcommand through argstashd on this bus: system, session or a D-Bus address' -r
complete -c argstash -n "__fish_argstash_needs_command" -s h -l help -d 'Print help'
complete -c argstash -n "__fish_argstash_needs_command" -s V -l version -d 'Print version'
complete -c argstash -n "__fish_argstash_needs_command" -f -a "inject" -d 'Hook functions so their arguments are stashed on the stack while they run'
complete -c argstash -n "__fish_argstash_needs_command" -f -a "eject" -d 'Remove hooks, restoring the original bytes exactly'
complete -c argstash -n "__fish_argstash_needs_command" -f -a "list" -d 'List the hooks recorded in a process'
complete -c argstash -n "__fish_argstash_needs_command" -f -a "bt" -d 'Print the backtrace of every thread (or one), with stashed arguments'
complete -c argstash -n "__fish_argstash_needs_command" -f -a "record" -d 'Sample every thread\'s stack into a flame graph (.svg), speedscope (.json), collapsed stacks (.txt) or pprof (.pb.gz)'
complete -c argstash -n "__fish_argstash_needs_command" -f -a "demo" -d 'Build and run the bundled demo target, hook it, and show the difference'
complete -c argstash -n "__fish_argstash_needs_command" -f -a "run" -d 'Start a command with hooks in place before its main; print every thread\'s backtrace if it crashes, times out or gets a chosen signal'
complete -c argstash -n "__fish_argstash_needs_command" -f -a "completions" -d 'Print a shell completion script for bash, zsh, fish, elvish or powershell'
complete -c argstash -n "__fish_argstash_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l pid -d 'Target process id' -r
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l func -d 'Function to hook: NAME, MODULE!NAME (e.g. libc.so.6!write) or 0xADDR, optionally with its parameter list for `bt` when there is no DWARF: \'bar(int, const char *)\'. Repeatable' -r
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l addr -d 'Function entry address to hook (same as --func 0xADDR). Repeatable' -r
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l stack-args -d 'Incoming 8-byte stack words to copy (arguments beyond the registers), 0-16: `N` for every function, `NAME=N` for the --func NAME alone (repeatable; wins over `N`). Default: found from each function\'s code; variadic functions get 8. Give it when argstash cannot tell' -r
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l unwind-registration -d 'Whether argstash may run the target\'s own functions after the stop, to register the hooks\' unwind information with libgcc (C++ exceptions) and load the gdb JIT helper: `safe` (default) only on a thread proved to be outside the allocator, the loader and libgcc (skipped, with a note, when none is found in time); `off` never' -r -f -a "safe\t'Only at a proved safe point'
off\t'Never run code in the target'"
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l safe-point-wait -d 'How long to look for a thread at a safe point, in milliseconds' -r
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l bus -d 'Send the subcommand through argstashd on this bus: system, session or a D-Bus address' -r
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l python -d 'Hook CPython\'s frame evaluator (_PyEval_EvalFrameDefault, in libpython or the executable), so `bt` pairs each native evaluator frame with its Python frames exactly'
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l float-args -d 'Also stash xmm0-xmm7 (float and double arguments); `bt` shows them as doubles'
complete -c argstash -n "__fish_argstash_using_subcommand inject" -l accept-unwind-loss -d 'Hook functions that a C++ exception could cross even when their unwind information cannot be registered with the program\'s unwinder first. Without it such an install is refused; with it, an exception thrown through such a hook ends the program'
complete -c argstash -n "__fish_argstash_using_subcommand inject" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c argstash -n "__fish_argstash_using_subcommand eject" -l pid -d 'Target process id' -r
complete -c argstash -n "__fish_argstash_using_subcommand eject" -l func -d 'Function whose hook to remove: NAME, MODULE!NAME or 0xADDR. Repeatable' -r
complete -c argstash -n "__fish_argstash_using_subcommand eject" -l unwind-registration -d 'Whether argstash may run the target\'s own functions after the stop, to register the hooks\' unwind information with libgcc (C++ exceptions) and load the gdb JIT helper: `safe` (default) only on a thread proved to be outside the allocator, the loader and libgcc (skipped, with a note, when none is found in time); `off` never' -r -f -a "safe\t'Only at a proved safe point'
off\t'Never run code in the target'"
complete -c argstash -n "__fish_argstash_using_subcommand eject" -l safe-point-wait -d 'How long to look for a thread at a safe point, in milliseconds' -r
complete -c argstash -n "__fish_argstash_using_subcommand eject" -l bus -d 'Send the subcommand through argstashd on this bus: system, session or a D-Bus address' -r
complete -c argstash -n "__fish_argstash_using_subcommand eject" -l all -d 'Remove every hook (the PEP 523 extension\'s call-through hooks stay: only it can remove them)'
complete -c argstash -n "__fish_argstash_using_subcommand eject" -l python -d 'Remove the Python hook (`inject --python`)'
complete -c argstash -n "__fish_argstash_using_subcommand eject" -l accept-unwind-loss -d 'Hook functions that a C++ exception could cross even when their unwind information cannot be registered with the program\'s unwinder first. Without it such an install is refused; with it, an exception thrown through such a hook ends the program'
complete -c argstash -n "__fish_argstash_using_subcommand eject" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c argstash -n "__fish_argstash_using_subcommand list" -l pid -d 'Target process id' -r
complete -c argstash -n "__fish_argstash_using_subcommand list" -l bus -d 'Send the subcommand through argstashd on this bus: system, session or a D-Bus address' -r
complete -c argstash -n "__fish_argstash_using_subcommand list" -l json -d 'Print JSON'
complete -c argstash -n "__fish_argstash_using_subcommand list" -s h -l help -d 'Print help'
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l pid -d 'Target process id' -r
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l core -d 'Read a core file instead of a live process' -r -F
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l coredump -d 'Read a core stored by systemd-coredump: `latest`, a crashed PID, or a program NAME (its command name or executable); the newest match is read' -r
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l exe -d 'With --core or --coredump: the crashed program\'s executable, if not at the path the core records' -r -F
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l sysroot -d 'With --core or --coredump: resolve the core\'s mapped file paths under this directory' -r -F
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l tid -d 'Only this thread' -r
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l debug-dir -d 'Look for separate debug files under DIR instead of /usr/lib/debug (build-id and debuglink layout). Repeatable; searched in order' -r -F
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l bus -d 'Send the subcommand through argstashd on this bus: system, session or a D-Bus address' -r
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l json -d 'Print JSON'
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l show-trampolines -d 'Show trampoline frames too'
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l always-stop -d 'Stop every thread to read it, even one blocked in a system call (read without a stop by default, so its call is not interrupted)'
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l python -d 'Show only the Python frames of a CPython process'
complete -c argstash -n "__fish_argstash_using_subcommand bt" -l native -d 'Show only the native frames (no Python frames interleaved)'
complete -c argstash -n "__fish_argstash_using_subcommand bt" -s h -l help -d 'Print help'
complete -c argstash -n "__fish_argstash_using_subcommand record" -l pid -d 'Record this running process (or give the program to start after --)' -r
complete -c argstash -n "__fish_argstash_using_subcommand record" -l duration -d 'Stop after this many seconds (default: at Ctrl-C or when the program exits)' -r
complete -c argstash -n "__fish_argstash_using_subcommand record" -l rate -d 'Samples per second, per thread (1..=10000)' -r
complete -c argstash -n "__fish_argstash_using_subcommand record" -l func -d 'Hook this function first (NAME, MODULE!NAME, 0xADDR, optionally with a parameter list), so its frames carry its arguments. Repeatable' -r
complete -c argstash -n "__fish_argstash_using_subcommand record" -l args -d 'Only these arguments in names (parameter or register names); implies --with-args' -r
complete -c argstash -n "__fish_argstash_using_subcommand record" -l threads -d 'Threads to sample: `all` or a comma-separated list of thread ids' -r
complete -c argstash -n "__fish_argstash_using_subcommand record" -s o -l output -d 'Output file; its extension chooses the format: .svg, .json (speedscope), .txt (collapsed), .pb.gz (pprof). Repeatable: one recording, several files' -r
complete -c argstash -n "__fish_argstash_using_subcommand record" -l sampler -d 'Who takes the samples: `kernel` (the default) has the kernel copy each thread\'s stack (perf_event_open, no thread stopped; falls back to ptrace with a note where it cannot serve, and for Python targets, whose frames only ptrace reads exactly); `ptrace` stops each thread for a moment and copies its stack and Python frames (`[py]`). `--sampler kernel` on a Python target reads its Python frames right after each sample (`[py~]`)' -r -f -a "ptrace\t'Threads stopped with ptrace, one at a time'
kernel\t'The kernel\'s sampler (perf_event_open): no thread stopped'"
complete -c argstash -n "__fish_argstash_using_subcommand record" -l debug-dir -d 'Look for separate debug files under DIR instead of /usr/lib/debug. Repeatable' -r -F
complete -c argstash -n "__fish_argstash_using_subcommand record" -l bus -d 'Send the subcommand through argstashd on this bus: system, session or a D-Bus address' -r
complete -c argstash -n "__fish_argstash_using_subcommand record" -l python -d 'Hook CPython\'s frame evaluator first, so Python frames are placed exactly'
complete -c argstash -n "__fish_argstash_using_subcommand record" -l idle -d 'Sample sleeping threads too (wall-clock time); by default only threads on the CPU are stopped and counted'
complete -c argstash -n "__fish_argstash_using_subcommand record" -l with-args -d 'Put a hooked frame\'s arguments into its name (`apply_entry(account=1003, ...)`)'
complete -c argstash -n "__fish_argstash_using_subcommand record" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c argstash -n "__fish_argstash_using_subcommand demo" -l bus -d 'Send the subcommand through argstashd on this bus: system, session or a D-Bus address' -r
complete -c argstash -n "__fish_argstash_using_subcommand demo" -s h -l help -d 'Print help'
complete -c argstash -n "__fish_argstash_using_subcommand run" -l func -d 'Function to hook before main: NAME, MODULE!NAME or 0xADDR, optionally with its parameter list (\'bar(int, const char *)\'). Repeatable' -r
complete -c argstash -n "__fish_argstash_using_subcommand run" -l stack-args -d 'Incoming 8-byte stack words to copy (arguments beyond the registers), 0-16: `N` for every function, `NAME=N` for the --func NAME alone (repeatable; wins over `N`). Default: found from each function\'s code; variadic functions get 8. Give it when argstash cannot tell' -r
complete -c argstash -n "__fish_argstash_using_subcommand run" -l unwind-registration -d 'Whether argstash may run the target\'s own functions after the stop, to register the hooks\' unwind information with libgcc (C++ exceptions) and load the gdb JIT helper: `safe` (default) only on a thread proved to be outside the allocator, the loader and libgcc (skipped, with a note, when none is found in time); `off` never' -r -f -a "safe\t'Only at a proved safe point'
off\t'Never run code in the target'"
complete -c argstash -n "__fish_argstash_using_subcommand run" -l safe-point-wait -d 'How long to look for a thread at a safe point, in milliseconds' -r
complete -c argstash -n "__fish_argstash_using_subcommand run" -l on-crash -d 'Print every thread\'s backtrace when the program gets a fatal signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP), before it dies of it' -r -f -a "on\t''
off\t''"
complete -c argstash -n "__fish_argstash_using_subcommand run" -l report -d 'Also append each report\'s `bt --json` object, one per line, to FILE' -r -F
complete -c argstash -n "__fish_argstash_using_subcommand run" -l timeout -d 'After SECS seconds: print the backtraces, kill the program (SIGKILL), exit 124' -r
complete -c argstash -n "__fish_argstash_using_subcommand run" -l on-signal -d 'Print the backtraces whenever the program gets SIG (e.g. SIGUSR2), then deliver it. Repeatable' -r
complete -c argstash -n "__fish_argstash_using_subcommand run" -l bus -d 'Send the subcommand through argstashd on this bus: system, session or a D-Bus address' -r
complete -c argstash -n "__fish_argstash_using_subcommand run" -l python -d 'Hook CPython\'s frame evaluator too (as `inject --python`)'
complete -c argstash -n "__fish_argstash_using_subcommand run" -l float-args -d 'Also stash xmm0-xmm7 (float and double arguments); `bt` shows them as doubles'
complete -c argstash -n "__fish_argstash_using_subcommand run" -l accept-unwind-loss -d 'Hook functions that a C++ exception could cross even when their unwind information cannot be registered with the program\'s unwinder first. Without it such an install is refused; with it, an exception thrown through such a hook ends the program'
complete -c argstash -n "__fish_argstash_using_subcommand run" -l follow-forks -d 'Report crashes of the processes the program forks too'
complete -c argstash -n "__fish_argstash_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c argstash -n "__fish_argstash_using_subcommand completions" -l bus -d 'Send the subcommand through argstashd on this bus: system, session or a D-Bus address' -r
complete -c argstash -n "__fish_argstash_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c argstash -n "__fish_argstash_using_subcommand help; and not __fish_seen_subcommand_from inject eject list bt record demo run completions help" -f -a "inject" -d 'Hook functions so their arguments are stashed on the stack while they run'
complete -c argstash -n "__fish_argstash_using_subcommand help; and not __fish_seen_subcommand_from inject eject list bt record demo run completions help" -f -a "eject" -d 'Remove hooks, restoring the original bytes exactly'
complete -c argstash -n "__fish_argstash_using_subcommand help; and not __fish_seen_subcommand_from inject eject list bt record demo run completions help" -f -a "list" -d 'List the hooks recorded in a process'
complete -c argstash -n "__fish_argstash_using_subcommand help; and not __fish_seen_subcommand_from inject eject list bt record demo run completions help" -f -a "bt" -d 'Print the backtrace of every thread (or one), with stashed arguments'
complete -c argstash -n "__fish_argstash_using_subcommand help; and not __fish_seen_subcommand_from inject eject list bt record demo run completions help" -f -a "record" -d 'Sample every thread\'s stack into a flame graph (.svg), speedscope (.json), collapsed stacks (.txt) or pprof (.pb.gz)'
complete -c argstash -n "__fish_argstash_using_subcommand help; and not __fish_seen_subcommand_from inject eject list bt record demo run completions help" -f -a "demo" -d 'Build and run the bundled demo target, hook it, and show the difference'
complete -c argstash -n "__fish_argstash_using_subcommand help; and not __fish_seen_subcommand_from inject eject list bt record demo run completions help" -f -a "run" -d 'Start a command with hooks in place before its main; print every thread\'s backtrace if it crashes, times out or gets a chosen signal'
complete -c argstash -n "__fish_argstash_using_subcommand help; and not __fish_seen_subcommand_from inject eject list bt record demo run completions help" -f -a "completions" -d 'Print a shell completion script for bash, zsh, fish, elvish or powershell'
complete -c argstash -n "__fish_argstash_using_subcommand help; and not __fish_seen_subcommand_from inject eject list bt record demo run completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'

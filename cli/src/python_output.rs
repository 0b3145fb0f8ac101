//! Backtraces as `bt` prints them: rendered by [`injector::render`] (native and
//! Python frames interleaved, or one side only with `--python` / `--native`).

pub use injector::render::View;
use injector::Backtrace;

/// Prints a backtrace as text or one JSON object, showing the frames `view` asks for.
pub fn print_backtrace(bt: &Backtrace, json: bool, view: View) {
    if json {
        println!("{}", injector::render::backtrace_json(bt, view));
    } else {
        print!("{}", injector::render::backtrace_text(bt, view));
    }
}

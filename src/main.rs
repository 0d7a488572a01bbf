fn main() {
    // Die quietly on a closed pipe (`ken search x | head`) like other Unix tools,
    // instead of panicking on the failed write.
    // SAFETY: setting a signal disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    std::process::exit(ken::cli::main());
}

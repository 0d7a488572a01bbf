fn main() {
    // Die quietly on a closed pipe (`ken search x | head`) like other Unix tools,
    // instead of panicking on the failed write.
    // SAFETY: setting a signal disposition before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    // Model inference allocates and frees large buffers per operation; without
    // this glibc returns them to the OS each time (measured: 45% slower).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only tunes the allocator, before any allocation-heavy work.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 30);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
    std::process::exit(ken::cli::main());
}

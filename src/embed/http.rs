//! Shared HTTP setup: TLS through rustls with the `ring` provider (cheaper to
//! build than aws-lc), installed once per process.

pub fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

//! What the benches that inject their own failures share: keeping those panics quiet.

/// Installs a panic hook that stays quiet about panics whose message is `injected` (the
/// bench's own injected failures, expected) and reports every other panic as before.
pub fn quiet_injected_panics(injected: &'static str) {
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let msg = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied());
        if msg != Some(injected) {
            default_hook(info);
        }
    }));
}

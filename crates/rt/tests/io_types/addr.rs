//! `spindle_io::net::ToSocketAddrs` against std's.

/// `(host, port)` with an IPv6 literal whose zone is an interface name ("fe80::1%lo"): std
/// hands the host to `getaddrinfo` as it is, which resolves it (scope id = the interface's
/// index). spindle's `(&str, u16)` impl wraps any host containing ':' in brackets
/// ("[fe80::1%lo]:80") and resolves that string with std's `str` impl, which does not strip
/// brackets: `getaddrinfo("[fe80::1%lo]")` fails. The type's docs promise std's behaviour
/// ("like std::net::ToSocketAddrs and implemented for the same types").
/// Correct: the same addresses as std (resolve `(host, port)` with std's tuple impl).
#[test]
fn scoped_ipv6_host_resolves_like_std() {
    let std_addrs: Vec<_> = std::net::ToSocketAddrs::to_socket_addrs(&("fe80::1%lo", 80))
        .map(Iterator::collect)
        .unwrap();
    let ours = spindle_io::net::ToSocketAddrs::to_socket_addrs(&("fe80::1%lo", 80u16));
    assert_eq!(ours.map_err(|e| e.to_string()), Ok(std_addrs));
}

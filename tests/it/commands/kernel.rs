//! What the kernel shows of a test's server, for tests that make things reach a stopped server
//! in a given order: they wait for each to arrive, not for a guessed time. The server's end of
//! a client's connection (`/proc/net/tcp`): the bytes it has not read yet, and whether the
//! client's hang-up has arrived.
use relock_testkit::Server;

/// The bytes the client on local port `client_port` sent that the server has not read yet (0
/// when there is no such connection).
pub(super) fn unread_by_server(server: &Server, client_port: u16) -> u64 {
    server_end(server, client_port).map_or(0, |(_, unread)| unread)
}

/// Whether the hang-up of the client on local port `client_port` has reached the server: its
/// end of the connection is no longer established (`CLOSE_WAIT` once the client's FIN
/// arrived, gone after a reset).
pub(super) fn hang_up_arrived(server: &Server, client_port: u16) -> bool {
    const ESTABLISHED: u8 = 0x01;
    server_end(server, client_port).is_none_or(|(state, _)| state != ESTABLISHED)
}

/// The server's end of the connection from local port `client_port`: its TCP state (as
/// `/proc/net/tcp` numbers them) and its receive queue (bytes not read yet).
fn server_end(server: &Server, client_port: u16) -> Option<(u8, u64)> {
    let port = |address: &str| {
        address
            .rsplit_once(':')
            .and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
    };
    let tables: String = ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .filter_map(|table| std::fs::read_to_string(table).ok())
        .collect();
    // `sl local_address rem_address st tx_queue:rx_queue ...`, addresses as `HEXIP:HEXPORT`
    // (the header line matches no port).
    tables.lines().find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, local, remote, state, queues, ..] = fields[..] else {
            return None;
        };
        if port(local)? != server.port || port(remote)? != client_port {
            return None;
        }
        let state = u8::from_str_radix(state, 16).ok()?;
        let unread = u64::from_str_radix(queues.split_once(':')?.1, 16).ok()?;
        Some((state, unread))
    })
}

//! The module loads and answers: the quickest end-to-end check.
use relock_testkit as common;

use common::Server;

#[test]
fn module_loads_and_acquires() {
    let server = Server::start();
    let mut c = server.conn();
    let token: Option<u64> = redis::cmd("LOCK.ACQUIRE")
        .arg("demo")
        .arg("me")
        .arg(10_000)
        .query(&mut c)
        .unwrap();
    assert!(token.is_some_and(|t| t > 0));
    let kind: String = redis::cmd("TYPE").arg("demo").query(&mut c).unwrap();
    assert_eq!(kind, "relock-lk");
    assert_eq!(common::info_field(&mut c, "locks"), 1);
}

//! A gateway that is stopping starts no server: a start that comes after the servers' process
//! groups were killed (a signal during start-up) would leave its process behind. A test binary
//! of its own, since stopping is for the whole process.

use toolshelf_gateway::stdio::{CallTimeout, ChildTransport, Fault, kill_all_groups};

fn sleeper() -> tokio::process::Command {
    let mut command = tokio::process::Command::new("sleep");
    command.arg("300");
    command
}

#[tokio::test]
async fn no_server_is_started_once_every_group_was_killed() {
    let before =
        ChildTransport::spawn("early", sleeper(), Fault::default(), CallTimeout::default())
            .expect("a server starts before the stop");
    let early = before.pid().expect("its pid");
    kill_all_groups();
    // Its group is killed: the process is gone (or a zombie until the transport reaps it).
    let gone = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map_or(true, |stat| stat.split_whitespace().nth(2) == Some("Z"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !gone(early) {
        assert!(
            std::time::Instant::now() < deadline,
            "pid {early} still runs"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let Err(e) = ChildTransport::spawn("late", sleeper(), Fault::default(), CallTimeout::default())
    else {
        panic!("a server started after the stop")
    };
    assert!(e.to_string().contains("the gateway is stopping"), "{e}");
}

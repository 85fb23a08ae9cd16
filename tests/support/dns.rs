//! A DNS server for the tests, on 127.0.0.1 (UDP and TCP, one port), answering from a zone
//! the test writes: MX and A records, NXDOMAIN for any name it does not know, and SERVFAIL
//! or silence for names told so.
//!
//! ```ignore
//! let dns = TestDns::start().await;
//! dns.mx("alpha.test", 10, "mx1.alpha.test");
//! dns.a("mx1.alpha.test", "127.0.0.2".parse().unwrap());
//! dns.null_mx("nomail.test");
//! dns.servfail("broken.test");
//! // [upstream] nameservers = ["<dns.addr()>"]
//! ```

use std::collections::{HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use hickory_resolver::proto::op::{Edns, Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, AAAA, MX, TXT};
use hickory_resolver::proto::rr::{Name, RData, Record, RecordType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};
use tokio::task::JoinHandle;

#[derive(Default)]
struct Zone {
    records: HashMap<(String, RecordType), Vec<RData>>,
    servfail: HashSet<String>,
    silent: HashSet<String>,
    /// Queries seen, as `name type`.
    queries: Vec<String>,
}

pub struct TestDns {
    addr: SocketAddr,
    zone: Arc<Mutex<Zone>>,
    tasks: Vec<JoinHandle<()>>,
}

impl TestDns {
    pub async fn start() -> TestDns {
        let (udp, tcp) = bind_pair().await;
        let addr = udp.local_addr().unwrap();
        let zone = Arc::new(Mutex::new(Zone::default()));
        let tasks = vec![
            tokio::spawn(serve_udp(udp, Arc::clone(&zone))),
            tokio::spawn(serve_tcp(tcp, Arc::clone(&zone))),
        ];
        TestDns { addr, zone, tasks }
    }

    /// `127.0.0.1:<port>`, for `nameservers`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn mx(&self, domain: &str, preference: u16, host: &str) {
        let exchange = match host {
            "." => Name::root(),
            _ => Name::from_ascii(format!("{host}.")).unwrap(),
        };
        self.add(
            domain,
            RecordType::MX,
            RData::MX(MX::new(preference, exchange)),
        );
    }

    /// `0 .`: the domain accepts no mail (RFC 7505).
    pub fn null_mx(&self, domain: &str) {
        self.mx(domain, 0, ".");
    }

    pub fn a(&self, name: &str, ip: Ipv4Addr) {
        self.add(name, RecordType::A, RData::A(A(ip)));
    }

    pub fn aaaa(&self, name: &str, ip: std::net::Ipv6Addr) {
        self.add(name, RecordType::AAAA, RData::AAAA(AAAA(ip)));
    }

    /// The name exists, with only a TXT record: its MX and A queries get empty answers, not
    /// NXDOMAIN.
    pub fn exists(&self, name: &str) {
        let txt = TXT::new(vec!["v=test".to_string()]);
        self.add(name, RecordType::TXT, RData::TXT(txt));
    }

    /// Answers SERVFAIL for every query about `name`.
    pub fn servfail(&self, name: &str) {
        self.zone.lock().unwrap().servfail.insert(key(name));
    }

    /// Never answers a query about `name`.
    pub fn silent(&self, name: &str) {
        self.zone.lock().unwrap().silent.insert(key(name));
    }

    /// Every query so far, as `name TYPE` (e.g. `alpha.test MX`).
    pub fn queries(&self) -> Vec<String> {
        self.zone.lock().unwrap().queries.clone()
    }

    fn add(&self, name: &str, rtype: RecordType, data: RData) {
        let mut zone = self.zone.lock().unwrap();
        zone.records
            .entry((key(name), rtype))
            .or_default()
            .push(data);
    }
}

impl Drop for TestDns {
    fn drop(&mut self) {
        self.tasks.iter().for_each(JoinHandle::abort);
    }
}

fn key(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// A UDP socket and a TCP listener on the same free port of 127.0.0.1.
async fn bind_pair() -> (UdpSocket, TcpListener) {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        if let Ok(tcp) = TcpListener::bind(udp.local_addr().unwrap()).await {
            return (udp, tcp);
        }
    }
    panic!("no port free for both UDP and TCP");
}

/// The answer to one query, or `None` to stay silent.
fn answer(zone: &Mutex<Zone>, request: &[u8]) -> Option<Vec<u8>> {
    let request = Message::from_vec(request).ok()?;
    let query = request.queries.first()?.clone();
    let name = key(&query.name.to_ascii());
    let mut zone = zone.lock().unwrap();
    zone.queries.push(format!("{name} {}", query.query_type));
    if zone.silent.contains(&name) {
        return None;
    }
    let mut response = Message::response(request.metadata.id, request.metadata.op_code);
    response.metadata.message_type = MessageType::Response;
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    response.metadata.recursion_available = true;
    response.metadata.authoritative = true;
    response.add_query(query.clone());
    if request.edns.is_some() {
        response.set_edns(Edns::new());
    }
    let known = zone.records.keys().any(|(n, _)| *n == name);
    if zone.servfail.contains(&name) {
        response.metadata.response_code = ResponseCode::ServFail;
    } else if let Some(data) = zone.records.get(&(name, query.query_type)) {
        for d in data {
            response.add_answer(Record::from_rdata(query.name.clone(), 60, d.clone()));
        }
    } else if !known {
        response.metadata.response_code = ResponseCode::NXDomain;
    }
    response.to_vec().ok()
}

async fn serve_udp(socket: UdpSocket, zone: Arc<Mutex<Zone>>) {
    let mut buf = vec![0u8; 4096];
    loop {
        let Ok((n, peer)) = socket.recv_from(&mut buf).await else {
            return;
        };
        if let Some(reply) = answer(&zone, &buf[..n]) {
            let _ = socket.send_to(&reply, peer).await;
        }
    }
}

async fn serve_tcp(listener: TcpListener, zone: Arc<Mutex<Zone>>) {
    while let Ok((stream, _)) = listener.accept().await {
        tokio::spawn(serve_tcp_conn(stream, Arc::clone(&zone)));
    }
}

/// Length-prefixed messages (RFC 1035 4.2.2), one answer per query, until the peer leaves.
async fn serve_tcp_conn(mut stream: TcpStream, zone: Arc<Mutex<Zone>>) {
    loop {
        let Ok(len) = stream.read_u16().await else {
            return;
        };
        let mut request = vec![0u8; len as usize];
        if stream.read_exact(&mut request).await.is_err() {
            return;
        }
        let Some(reply) = answer(&zone, &request) else {
            continue;
        };
        let mut framed = (reply.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&reply);
        if stream.write_all(&framed).await.is_err() {
            return;
        }
    }
}

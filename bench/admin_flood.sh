#!/usr/bin/env bash
# SMTP AUTH while the admin endpoint is flooded, for each build in RELAY_BINS (default: the
# release build):
#   1. AUTHS logins to SMTP (AUTH PLAIN, a real argon2id hash from `mailsluice hash-password`,
#      smtp.auth.max_parallel_checks = 2), one after the other, each on a new connection:
#      their latency alone, then while FLOOD clients send admin requests with a wrong password
#      (to an [admin] password_hash of the same parameters) as fast as they are answered;
#      the admin answers by status during the flood;
#   2. HALF connections to the admin endpoint, each a request header never finished, held
#      open (the relay runs with 1024 file descriptors), then a login and one message through
#      SMTP: was it answered (within 10 s), and how many of the HALF the relay still holds.
# Usage: bench/admin_flood.sh   (env: RELAY_BINS="build1 build2" AUTHS=40 FLOOD=50 HALF=1100)
set -euo pipefail
source "$(dirname "$0")/common.sh"
AUTHS=${AUTHS:-40}
FLOOD=${FLOOD:-50}
HALF=${HALF:-1100}
SMTP_PORT=${SMTP_PORT:-43625}
ADMIN_PORT=${ADMIN_PORT:-43626}
if [ -z "${RELAY_BINS:-}" ]; then
  relay_bin
  RELAY_BINS=$RELAY_BIN
fi
need_tools "python3 and prlimit are needed" python3 prlimit
scratch

cat > "$work/drive.py" <<'PY'
import base64, http.client, resource, smtplib, socket, statistics, sys, threading, time

smtp_port, admin_port, auths, flood, half = map(int, sys.argv[1:6])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))

def login():
    start = time.perf_counter()
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=60) as s:
        s.ehlo("bench.test")
        s.login("app", "s3cret")
    return (time.perf_counter() - start) * 1000

def logins():
    times = sorted(login() for _ in range(auths))
    return statistics.median(times), times[int(len(times) * 0.9) - 1], times[-1]

def show(label, m):
    print(f"  SMTP AUTH {label}: median {m[0]:.1f} ms, p90 {m[1]:.1f} ms, max {m[2]:.1f} ms")

show("alone", logins())

stop = threading.Event()
statuses = {}
lock = threading.Lock()
wrong = "Basic " + base64.b64encode(b"admin:guess").decode()

def guess():
    while not stop.is_set():
        try:
            c = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=60)
            c.request("GET", "/metrics", headers={"Authorization": wrong})
            status = c.getresponse().status
            c.close()
        except OSError as e:
            status = type(e).__name__
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

threads = [threading.Thread(target=guess, daemon=True) for _ in range(flood)]
for t in threads:
    t.start()
time.sleep(1)
show(f"with {flood} clients guessing the admin password", logins())
stop.set()
for t in threads:
    t.join(timeout=60)
print(f"  admin answers during the flood: {dict(sorted(statuses.items(), key=str))}")

held = []
for _ in range(half):
    try:
        c = socket.create_connection(("127.0.0.1", admin_port), timeout=5)
        c.sendall(b"GET /metrics HTTP/1.1\r\nHost: relay\r\n")
        held.append(c)
    except OSError:
        break
time.sleep(1)
start = time.perf_counter()
try:
    with smtplib.SMTP("127.0.0.1", smtp_port, timeout=10) as s:
        s.login("app", "s3cret")
        s.sendmail("a@example.com", ["b@example.net"], b"Subject: during\r\n\r\nx\r\n")
    mail = f"answered 250 in {(time.perf_counter() - start) * 1000:.0f} ms"
except (OSError, smtplib.SMTPException) as e:
    mail = f"not answered ({type(e).__name__}: {e})"
def still_open(c):
    """Nothing to read and no close: the relay holds it (an answer or a close would show)."""
    c.setblocking(False)
    try:
        c.recv(1)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False

open_now = sum(still_open(c) for c in held)
print(f"  {len(held)} half-sent admin requests: SMTP mail {mail}; {open_now} still open")
for c in held:
    c.close()
PY

for bin in $RELAY_BINS; do
  hash=$(echo "s3cret" | "$bin" hash-password)
  cat > "$work/relay.toml" <<TOML
[smtp]
listen = ["127.0.0.1:$SMTP_PORT"]
trusted_networks = ["192.0.2.0/24"]
allow_plaintext_auth = true
[smtp.auth]
users = [{ user = "app", password_hash = "$hash" }]
max_parallel_checks = 2
[upstream]
url = "file://$work/out"
[admin]
listen = "127.0.0.1:$ADMIN_PORT"
password_hash = "$hash"
TOML
  RUST_LOG=error prlimit --nofile=1024 "$bin" --config "$work/relay.toml" 2>"$work/relay.log" &
  pid=$!
  if ! (wait_port "$SMTP_PORT" && wait_port "$ADMIN_PORT"); then
    cat "$work/relay.log" >&2
    exit 1
  fi
  echo "$bin"
  python3 "$work/drive.py" "$SMTP_PORT" "$ADMIN_PORT" "$AUTHS" "$FLOOD" "$HALF"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done

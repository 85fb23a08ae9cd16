#!/usr/bin/env bash
# Resident memory of `ses://` per megabyte of messages in flight, for each build in RELAY_BINS
# (default: the release build). A stand-in for SES's API on 127.0.0.1 (Python) reads each
# SendEmail whole and answers it HOLD seconds later; COUNT messages of SIZE_MB MB are sent to
# the relay at once by as many SMTP clients. The relay's resident memory is sampled every
# 20 ms: its peak over the baseline (after one small message, so the SDK is loaded), divided
# by the megabytes in flight.
# Usage: bench/ses_memory.sh   (env: RELAY_BINS="build1 build2" COUNT=4 SIZE_MB=38 HOLD=3 ROUNDS=2)
set -euo pipefail
source "$(dirname "$0")/common.sh"
COUNT=${COUNT:-4}
SIZE_MB=${SIZE_MB:-38}
HOLD=${HOLD:-3}
ROUNDS=${ROUNDS:-2}
SMTP_PORT=${SMTP_PORT:-43635}
SES_PORT=${SES_PORT:-43636}
if [ -z "${RELAY_BINS:-}" ]; then
  relay_bin
  RELAY_BINS=$RELAY_BIN
fi
need_tools "python3 is needed" python3
scratch

cat > "$work/ses.py" <<'PY'
import http.server, json, sys, time

port, hold = int(sys.argv[1]), float(sys.argv[2])
count = 0

class SendEmail(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        global count
        length = int(self.headers.get("content-length", 0))
        while length > 0:
            length -= len(self.rfile.read(min(length, 1 << 20)))
        count += 1
        big = int(self.headers.get("content-length", 0)) > 1 << 20
        time.sleep(hold if big else 0)
        body = json.dumps({"MessageId": f"bench-{count}"}).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

http.server.ThreadingHTTPServer(("127.0.0.1", port), SendEmail).serve_forever()
PY

cat > "$work/send.py" <<'PY'
import smtplib, sys, threading, time

smtp_port, pid, count, size_mb = map(int, sys.argv[1:5])

def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])

def send(body, results):
    try:
        with smtplib.SMTP("127.0.0.1", smtp_port, timeout=300) as s:
            s.sendmail("a@example.com", ["b@example.net"], body)
        results.append("250")
    except (OSError, smtplib.SMTPException) as e:
        results.append(str(e)[:80])

warm = []
send(b"Subject: warm\r\n\r\nx\r\n", warm)
time.sleep(0.5)
base = rss_kib()
line = b"x" * 998 + b"\r\n"
body = b"Subject: big\r\n\r\n" + line * (size_mb * 1024 * 1024 // len(line))
results = []
threads = [threading.Thread(target=send, args=(body, results)) for _ in range(count)]
for t in threads:
    t.start()
peak = base
while any(t.is_alive() for t in threads):
    peak = max(peak, rss_kib())
    time.sleep(0.02)
in_flight = count * len(body) / 2**20
grown = (peak - base) / 1024
print(f"  {count} x {len(body) / 2**20:.1f} MB: baseline {base / 1024:.0f} MB, peak {peak / 1024:.0f} MB,"
      f" +{grown:.0f} MB = {grown / in_flight:.2f} MB resident per MB in flight; answers {results}")
PY

for bin in $RELAY_BINS; do
  echo "$bin"
  for round in $(seq "$ROUNDS"); do
    python3 "$work/ses.py" "$SES_PORT" "$HOLD" &
    ses=$!
    wait_port "$SES_PORT"
    cat > "$work/relay.toml" <<TOML
[smtp]
listen = ["127.0.0.1:$SMTP_PORT"]
max_message_bytes = 45000000
max_buffered_bytes = 2147483648
[upstream]
url = "ses://eu-west-1"
endpoint_url = "http://127.0.0.1:$SES_PORT"
timeout_ms = 120000
pool_size = 16
TOML
    AWS_ACCESS_KEY_ID=AKIDBENCH AWS_SECRET_ACCESS_KEY=bench AWS_EC2_METADATA_DISABLED=true \
      RUST_LOG=error "$bin" --config "$work/relay.toml" 2>"$work/relay.log" &
    pid=$!
    wait_port "$SMTP_PORT"
    python3 "$work/send.py" "$SMTP_PORT" "$pid" "$COUNT" "$SIZE_MB"
    kill "$pid" "$ses"
    wait "$pid" "$ses" 2>/dev/null || true
  done
done

#!/usr/bin/env bash
# SMTP throughput with a webhook on every event against none, in one run:
#   smtp-source -> mailsluice (no webhook)          -> smtp-sink
#   smtp-source -> mailsluice ([[webhook]] "*", all) -> smtp-sink, events -> HTTPS receiver
# Both relays run side by side with the same config but the webhook ([reputation] on in both:
# webhooks need it), and are measured in turn, A B A B, 20 reused sessions, 1 KiB messages,
# 1 recipient. The receiver is Python's HTTP server over TLS on 127.0.0.1 with a certificate
# made by openssl for the run (trusted by the relay through ca_file), answering 200. Prints
# messages/s of each and the ratio, then what the webhook relay counted (sent, failed,
# dropped) and the events the receiver got. The relays' own CPU time per message (utime +
# stime from /proc/<pid>/stat before and after each round) separates the relay's cost from
# the receiver's, which shares the machine.
# Needs Debian's postfix package (smtp-source, smtp-sink), openssl, python3 and curl.
# Usage: bench/webhooks.sh [messages per round]   (default 20000; RELAY_BIN=path runs another
#   relay build)
set -euo pipefail
source "$(dirname "$0")/common.sh"
N=${1:-20000}
SINK_PORT=${SINK_PORT:-42525}
PLAIN_PORT=${PLAIN_PORT:-42526}
HOOKED_PORT=${HOOKED_PORT:-42527}
ADMIN_PORT=${ADMIN_PORT:-42528}
RECEIVER_PORT=${RECEIVER_PORT:-42529}
need_tools "install postfix, openssl, python3 and curl" smtp-source smtp-sink openssl python3 curl
relay_bin
scratch

openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj "/CN=127.0.0.1" \
  -addext "subjectAltName=IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" -keyout "$work/key.pem" -out "$work/cert.pem" 2>/dev/null
cat > "$work/receiver.py" <<'PY'
import http.server, json, ssl, sys
events = posts = 0
class Hook(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real receiver
    def do_POST(self):
        global events, posts
        body = self.rfile.read(int(self.headers["Content-Length"]))
        events += len(json.loads(body)["events"]); posts += 1
        self.send_response(200); self.send_header("Content-Length", "0"); self.end_headers()
    def do_GET(self):
        text = f"{events} in {posts} POSTs".encode()
        self.send_response(200); self.send_header("Content-Length", str(len(text)))
        self.end_headers(); self.wfile.write(text)
    def log_message(self, *args): pass
server = http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Hook)
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(sys.argv[2], sys.argv[3])
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
PY
python3 "$work/receiver.py" $RECEIVER_PORT "$work/cert.pem" "$work/key.pem" &
smtp-sink -u nobody 127.0.0.1:$SINK_PORT 1000 >"$work/sink.log" 2>&1 &

config() { # port, extra
  cat <<TOML
[smtp]
listen = ["127.0.0.1:$1"]
max_connections = 10000
[upstream]
url = "smtp://127.0.0.1:$SINK_PORT"
tls = "none"
pool_size = 20
[reputation]
key = "header:X-Tenant"
$2
TOML
}
config $PLAIN_PORT "" > "$work/plain.toml"
config $HOOKED_PORT "[admin]
listen = \"127.0.0.1:$ADMIN_PORT\"
[[webhook]]
tenant = \"*\"
url = \"https://127.0.0.1:$RECEIVER_PORT/hook\"
secret_env = \"BENCH_WEBHOOK_SECRET\"
allow_networks = [\"127.0.0.0/8\"]
ca_file = \"$work/cert.pem\"" > "$work/hooked.toml"
export BENCH_WEBHOOK_SECRET=bench-secret
RUST_LOG=warn "$RELAY_BIN" --config "$work/plain.toml" 2>"$work/plain.log" &
PLAIN_PID=$!
RUST_LOG=warn "$RELAY_BIN" --config "$work/hooked.toml" 2>"$work/hooked.log" &
HOOKED_PID=$!
for port in $SINK_PORT $PLAIN_PORT $HOOKED_PORT $RECEIVER_PORT; do wait_port $port; done

TCK=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' /proc/$1/stat; } # utime + stime of a running process

rate() { # port, relay pid -> "messages/s relay-CPU-microseconds-per-message"
  local start end cpu0
  cpu0=$(ticks $2)
  start=$(date +%s.%N)
  smtp-source -s 20 -l 1024 -m "$N" -f from@example.com -t to@example.com -d 127.0.0.1:$1 \
    || { echo "smtp-source failed against port $1" >&2; exit 1; }
  end=$(date +%s.%N)
  echo "$(echo "$N / ($end - $start)" | bc -l) $(echo "($(ticks $2) - $cpu0) * 1000000 / $TCK / $N" | bc -l)"
}

printf '%-8s %10s %10s %7s %12s %12s %7s\n' round none/s webhook/s ratio \
  "none us/msg" "webhook us/msg" ratio
sum_plain=0; sum_hooked=0; cpu_plain=0; cpu_hooked=0
for round in 1 2; do
  read -r p pc <<<"$(rate $PLAIN_PORT $PLAIN_PID)"; read -r h hc <<<"$(rate $HOOKED_PORT $HOOKED_PID)"
  sum_plain=$(echo "$sum_plain + $p" | bc -l); sum_hooked=$(echo "$sum_hooked + $h" | bc -l)
  cpu_plain=$(echo "$cpu_plain + $pc" | bc -l); cpu_hooked=$(echo "$cpu_hooked + $hc" | bc -l)
  printf '%-8s %10.0f %10.0f %7.3f %12.1f %12.1f %7.3f\n' $round "$p" "$h" "$(echo "$h / $p" | bc -l)" \
    "$pc" "$hc" "$(echo "$hc / $pc" | bc -l)"
done
printf '%-8s %10.0f %10.0f %7.3f %12.1f %12.1f %7.3f\n' both "$(echo "$sum_plain / 2" | bc -l)" \
  "$(echo "$sum_hooked / 2" | bc -l)" "$(echo "$sum_hooked / $sum_plain" | bc -l)" \
  "$(echo "$cpu_plain / 2" | bc -l)" "$(echo "$cpu_hooked / 2" | bc -l)" \
  "$(echo "$cpu_hooked / $cpu_plain" | bc -l)"
sleep 2 # the last batches
grep -m3 webhook "$work/hooked.log" >&2 || true
metrics=$(curl -s http://127.0.0.1:$ADMIN_PORT/metrics)
for m in sent_total failed_total dropped_total; do
  echo "mailsluice_webhook_$m: $(echo "$metrics" | awk -v m="mailsluice_webhook_$m" '$1 ~ "^"m"[{ ]" {s += $2} END {print s + 0}')"
done
echo "events the receiver got: $(curl -sk https://127.0.0.1:$RECEIVER_PORT/)"
echo "messages sent to the webhook relay: $((2 * N)) (one accepted event each)"

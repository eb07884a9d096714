package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/flowrun/flow/internal/natsconn"
	"github.com/flowrun/flow/internal/natsserver"
)

// natsServer is the NATS server one stack runs against: a nats-server process (the default) or
// one embedded in this process.
type natsServer interface {
	// Connect opens a new connection named name.
	Connect(name string) (*nats.Conn, error)
	// PIDs are the server's processes, none when it runs in this process.
	PIDs() []int
	// Stop stops the server and removes its store.
	Stop() error
}

// natsConfig returns a nats-server configuration file: JetStream on with its store in dir, the
// client port on loopback, and the fsync policy sync ("" for the server's default, "always", or
// a duration such as "10s").
func natsConfig(port int, dir, sync string) (string, error) {
	if strings.ContainsAny(dir, "\"\\\n") {
		return "", fmt.Errorf("store directory %q: quotes, backslashes and newlines are not supported", dir)
	}
	var b strings.Builder
	b.WriteString("# Written by flowbench for one benchmark stack.\n")
	fmt.Fprintf(&b, "server_name: flowbench\nlisten: 127.0.0.1:%d\n", port)
	// As Flow's embedded server (internal/natsserver): a large batch's commit must fit.
	b.WriteString("max_payload: 8MB\n")
	b.WriteString("jetstream {\n")
	fmt.Fprintf(&b, "  store_dir: \"%s\"\n", dir)
	switch s := strings.TrimSpace(sync); s {
	case "":
	case "always":
		b.WriteString("  sync_interval: always\n")
	default:
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return "", fmt.Errorf(`sync must be "", "always" or a positive duration, got %q`, sync)
		}
		fmt.Fprintf(&b, "  sync_interval: \"%s\"\n", d)
	}
	b.WriteString("}\n")
	return b.String(), nil
}

// BuildNATS builds nats-server at the version go.mod requires into out, with the go command
// found on PATH, from the module in the current directory.
func BuildNATS(ctx context.Context, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/nats-io/nats-server/v2")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("building nats-server (go build -o %s github.com/nats-io/nats-server/v2): %w\n%s", out, err, stderr.String())
	}
	return nil
}

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// natsProcess is a nats-server child process with a store in a temporary directory.
type natsProcess struct {
	cmd    *exec.Cmd
	url    string
	dir    string
	out    *tailBuffer
	exited chan struct{} // closed once the process has exited
	err    error         // Wait's error, set before exited is closed
}

// startNATSProcess starts bin with a generated configuration and waits until JetStream answers
// (at most 20 s). The child is killed if this process dies.
func startNATSProcess(ctx context.Context, bin, sync string) (*natsProcess, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	p, err := spawnNATS(bin, port, func(dir string) (string, error) { return natsConfig(port, dir+"/store", sync) })
	if err != nil {
		return nil, err
	}
	if err := p.awaitReady(ctx, 20*time.Second); err != nil {
		return nil, errors.Join(err, p.Stop())
	}
	return p, nil
}

// spawnNATS starts bin, listening for clients on port, with the configuration conf writes for a
// new temporary directory, without waiting for it to be ready.
func spawnNATS(bin string, port int, conf func(dir string) (string, error)) (*natsProcess, error) {
	dir, err := os.MkdirTemp("", "flowbench-nats-")
	if err != nil {
		return nil, err
	}
	p := &natsProcess{dir: dir, out: &tailBuffer{max: 8 << 10}, exited: make(chan struct{})}
	text, err := conf(dir)
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	if err := os.WriteFile(dir+"/nats.conf", []byte(text), 0o644); err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	p.url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	p.cmd = exec.Command(bin, "-c", dir+"/nats.conf")
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("starting %s: %w", bin, err), os.RemoveAll(dir))
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

// awaitReady polls until a connection's JetStream account info answers.
func (p *natsProcess) awaitReady(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-p.exited:
			return fmt.Errorf("nats-server exited before it was ready (%v):\n%s", p.err, p.out.String())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if last = p.ping(ctx); last == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("nats-server at %s was not ready within %s: %v\n%s", p.url, within, last, p.out.String())
}

func (p *natsProcess) ping(ctx context.Context) error {
	nc, err := nats.Connect(p.url, nats.Timeout(time.Second))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err = js.AccountInfo(actx)
	return err
}

func (p *natsProcess) Connect(name string) (*nats.Conn, error) {
	return nats.Connect(p.url, nats.Name(name), natsconn.SyncQueue)
}

func (p *natsProcess) PIDs() []int { return []int{p.cmd.Process.Pid} }

// Stop asks the server to stop (SIGTERM), kills it after 15 s, and removes its store.
func (p *natsProcess) Stop() error {
	var err error
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(15 * time.Second):
			err = fmt.Errorf("nats-server did not stop within 15 s of SIGTERM; killed it")
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	}
	return errors.Join(err, os.RemoveAll(p.dir))
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if over := len(t.b) - t.max; over > 0 {
		t.b = append(t.b[:0], t.b[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// embeddedNATS is a nats-server inside this process (internal/natsserver, as `flow dev` runs
// it), reached by in-process connections.
type embeddedNATS struct {
	srv *natsserver.Server
	dir string
}

func startEmbeddedNATS(sync string) (*embeddedNATS, error) {
	dir, err := os.MkdirTemp("", "flowbench-nats-")
	if err != nil {
		return nil, err
	}
	srv, err := natsserver.Start(natsserver.Config{Dir: dir, NoListen: true, Sync: sync,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	return &embeddedNATS{srv: srv, dir: dir}, nil
}

func (e *embeddedNATS) Connect(name string) (*nats.Conn, error) {
	return e.srv.Connect(nats.Name(name))
}

func (e *embeddedNATS) PIDs() []int { return nil }

func (e *embeddedNATS) Stop() error {
	return errors.Join(e.srv.ShutdownWithin(15*time.Second), os.RemoveAll(e.dir))
}

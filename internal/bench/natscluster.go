package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flowrun/flow/internal/natsconn"
)

// natsCluster is a cluster of nats-server child processes on this machine, routed to each
// other, each with its own store: Flow's streams on it are replicated (Options.Replicas).
type natsCluster struct {
	members []*natsProcess
	urls    string
}

// natsClusterConfig is the configuration of member i of a cluster whose members listen for
// clients on ports and for routes on routes.
func natsClusterConfig(i int, ports, routes []int, dir, sync string) (string, error) {
	conf, err := natsConfig(ports[i], dir, sync)
	if err != nil {
		return "", err
	}
	conf = strings.Replace(conf, "server_name: flowbench\n", fmt.Sprintf("server_name: flowbench-%d\n", i+1), 1)
	var b strings.Builder
	b.WriteString(conf)
	fmt.Fprintf(&b, "cluster {\n  name: flowbench\n  listen: 127.0.0.1:%d\n  routes: [\n", routes[i])
	for j, r := range routes {
		if j != i {
			fmt.Fprintf(&b, "    nats-route://127.0.0.1:%d\n", r)
		}
	}
	b.WriteString("  ]\n}\n")
	return b.String(), nil
}

// startNATSCluster starts n members and waits until JetStream answers on each (at most 30 s).
func startNATSCluster(ctx context.Context, bin, sync string, n int) (_ *natsCluster, err error) {
	ports, routes := make([]int, n), make([]int, n)
	for i := range n {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
		if routes[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	c := &natsCluster{}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.Stop())
		}
	}()
	var urls []string
	for i := range n {
		p, err := spawnNATS(bin, ports[i], func(dir string) (string, error) {
			return natsClusterConfig(i, ports, routes, dir+"/store", sync)
		})
		if err != nil {
			return nil, err
		}
		c.members = append(c.members, p)
		urls = append(urls, p.url)
	}
	c.urls = strings.Join(urls, ",")
	for _, p := range c.members {
		if err := p.awaitReady(ctx, 30*time.Second); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *natsCluster) Connect(name string) (*nats.Conn, error) {
	return nats.Connect(c.urls, nats.Name(name), natsconn.SyncQueue)
}

func (c *natsCluster) PIDs() []int {
	var pids []int
	for _, p := range c.members {
		pids = append(pids, p.PIDs()...)
	}
	return pids
}

// Stop stops every member and removes its store.
func (c *natsCluster) Stop() error {
	var errs []error
	for _, p := range c.members {
		errs = append(errs, p.Stop())
	}
	return errors.Join(errs...)
}

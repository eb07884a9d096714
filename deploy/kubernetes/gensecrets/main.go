// Command gensecrets writes the secret files a Kubernetes overlay generates its Secrets from
// (`make k8s-secrets`, docs/kubernetes.md, "Secrets"): random passwords for the NATS users of
// the roles in internal/natsperm, their bcrypt hashes for the NATS servers, the cluster routes'
// credentials, a CA and a certificate for the routes' mutual TLS, and an ingress bearer token.
//
//	go run ./deploy/kubernetes/gensecrets -dir deploy/kubernetes/overlays/prod -namespace flow
//
// It refuses to replace a file that exists unless -force is given: replacing the files rotates
// every password at once (see docs/kubernetes.md for what that restarts).
package main

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gensecrets:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("gensecrets", flag.ContinueOnError)
	dir := fl.String("dir", "", "the overlay's directory, where the files are written (required)")
	force := fl.Bool("force", false, "replace files that exist (rotates every secret)")
	var o Options
	fl.StringVar(&o.Namespace, "namespace", "", "the overlay's namespace, added to the route certificate's names (default: short names only)")
	fl.IntVar(&o.Replicas, "nats-replicas", 3, "the NATS StatefulSet's replicas: one route to each")
	fl.IntVar(&o.Days, "days", 365, "validity of the route CA and certificate, in days")
	fl.IntVar(&o.Cost, "cost", 11, "bcrypt cost of the password hashes")
	fl.BoolVar(&o.NoTLS, "no-tls", false, "write no route CA or certificate (cert-manager or your PKI provides the Secret flow-nats-routes-tls)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *dir == "" || fl.NArg() > 0 {
		return errors.New("usage: gensecrets -dir OVERLAY_DIR [-force] [-namespace NS] [-nats-replicas 3] [-days 365] [-cost 11] [-no-tls]")
	}
	if st, err := os.Stat(*dir); err != nil || !st.IsDir() {
		return fmt.Errorf("-dir %s is not a directory: create the overlay's directory first", *dir)
	}
	files, err := Generate(o)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	if !*force {
		var exist []string
		for _, name := range names {
			if _, err := os.Stat(filepath.Join(*dir, name)); err == nil {
				exist = append(exist, name)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return err
			}
		}
		if len(exist) > 0 {
			return fmt.Errorf("%s already holds %s: pass -force (make k8s-secrets FORCE=1) to replace them, which rotates every password and certificate",
				*dir, strings.Join(exist, ", "))
		}
	}
	for _, name := range names {
		if err := os.WriteFile(filepath.Join(*dir, name), files[name], 0o600); err != nil {
			return err
		}
		fmt.Println("wrote", filepath.Join(*dir, name))
	}
	return nil
}

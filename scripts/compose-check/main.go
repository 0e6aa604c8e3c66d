// Validate a compose file the way `docker compose config` does (compose-go v2 loader:
// JSON schema, interpolation, normalisation, consistency checks), without a Docker engine.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/compose-spec/compose-go/v2/cli"
)

func main() {
	path := os.Args[1]
	abs, _ := filepath.Abs(path)
	opts, err := cli.NewProjectOptions([]string{abs},
		cli.WithOsEnv, cli.WithWorkingDirectory(filepath.Dir(abs)), cli.WithName("dpbandit"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "INVALID:", err)
		os.Exit(1)
	}
	out, err := project.MarshalYAML()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Stdout.Write(out)
}

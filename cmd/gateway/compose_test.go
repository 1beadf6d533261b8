package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// docker-compose.yml runs commands of this binary: each must parse with the
// file's own variables, the gateway's healthcheck must be `gateway
// healthcheck`, and the file must be valid Compose.
func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	file := string(b)
	composeEnv := env("GATEWAY_DATABASE_DSN", "gateway:gateway@tcp(mariadb:3306)/gateway", "GATEWAY_PSP", "fake",
		"GATEWAY_LOG_FORMAT", "json", "GATEWAY_ADDR", "0.0.0.0:8080", "GATEWAY_ADMIN_ADDR", "0.0.0.0:9091")
	lists := regexp.MustCompile(`(?m)^\s+(command|test): (\[.*\])\s*$`).FindAllStringSubmatch(file, -1)
	var commands []string
	for _, m := range lists {
		var args []string
		if err := json.Unmarshal([]byte(m[2]), &args); err != nil {
			t.Fatalf("%s: %s is not a list of strings: %v", m[1], m[2], err)
		}
		if m[1] == "test" {
			if args[0] != "CMD" || args[1] != "/gateway" {
				continue // another image's healthcheck
			}
			args = args[2:]
		}
		commands = append(commands, strings.Join(args, " "))
		a, _, _ := testApp(composeEnv, "", false)
		if _, _, err := a.parse(context.Background(), args); err != nil {
			t.Errorf("compose runs `gateway %s`, which does not parse: %v", strings.Join(args, " "), err)
		}
	}
	for _, want := range []string{"migrate up", "serve", "healthcheck", "merchants create --name Compose demo"} {
		if !strings.Contains(strings.Join(commands, "\n"), want) {
			t.Errorf("compose does not run `gateway %s` (runs %q)", want, commands)
		}
	}
	if strings.Contains(file, "GATEWAY_AUTO_MIGRATE") {
		t.Error("two migration paths: the migrate service and GATEWAY_AUTO_MIGRATE")
	}
	if !strings.Contains(file, "${GATEWAY_HOST_PORT:-8080}:8080") {
		t.Error("the host port is not configurable")
	}
	// Compose kills a service its stop grace after SIGTERM: the gateway's
	// drain must end first.
	srv, err := parseServe(t, composeEnv)
	if err != nil {
		t.Fatal(err)
	}
	drain := srv.Server.HTTP.ShutdownTimeout
	grace := regexp.MustCompile(`(?m)^\s+stop_grace_period: (\S+)$`).FindStringSubmatch(file)
	if grace == nil {
		t.Error("the gateway service has no stop_grace_period: compose kills it 10s after SIGTERM, mid-drain")
	} else if d, err := time.ParseDuration(grace[1]); err != nil || d <= drain {
		t.Errorf("stop_grace_period %s does not outlast the drain (GATEWAY_SHUTDOWN_TIMEOUT %s)", grace[1], drain)
	}

	tool := []string{"docker-compose"}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		if exec.Command("docker", "compose", "version").Run() != nil {
			t.Skip("neither docker-compose nor the docker compose plugin is installed: run make deps (or apt-get install docker-compose) to check the file's syntax")
		}
		tool = []string{"docker", "compose"}
	}
	cmd := exec.Command(tool[0], append(tool[1:], "-f", "../../docker-compose.yml", "config", "-q")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s config: %v\n%s", strings.Join(tool, " "), err, out)
	}
}

// Package composetest holds the chaos test of the docker compose stack (docker-compose.yml at
// the repository's root): it builds the images with scripts/images.sh, brings the stack up under
// a project name of its own (flowtest-<random>) with free published ports, starts runs of the
// example workflows through the ingress's HTTP API, kills a NATS node and a worker under load,
// starts them again, and checks over the history service's HTTP API that every run completed
// with a history that passes core.Check. It skips when Docker or a compose tool is missing.
//
// The stack is torn down (docker-compose down -v) whatever happens; a test binary killed from
// outside can leave one behind: `docker ps --filter name=flowtest-` shows it, and
// `docker-compose -p flowtest-XXXX down -v --remove-orphans` removes it.
package composetest

/*
 * sbx port: where this host reaches the exposed ports of a sandbox made by
 * `sbx create -p PORT`, as `docker port` prints them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx port ID [PORT]\n"
"\n"
"Print where this host reaches the exposed ports of sandbox ID (an id, a\n"
"name or a unique id prefix), as `docker port` does: without PORT one line\n"
"per exposed port, \"PORT/tcp -> ENDPOINT\", ascending; with PORT its\n"
"ENDPOINT alone. An ENDPOINT is HOST:PORT (docker: 127.0.0.1 and the host\n"
"port the Engine chose; local and bubblewrap: the port itself) or a URL\n"
"(a hosted provider's preview address). Ports are exposed with\n"
"`sbx create -p PORT`; a port that was not is an error, whatever listens\n"
"on it.\n"
"\n"
"  -h, --help   show this help and exit\n"
"\n"
"Exit status: 0 when every port asked for was printed; 125 otherwise (a\n"
"port not exposed is named: code=not_found; a backend without exposed\n"
"ports: code=feature_not_supported).\n");
}

static int port_main(int argc, char **argv)
{
    sbx_error *error = NULL;
    sbx_sandbox *sandbox;
    unsigned long port = 0;
    int status = cli_parse_options(&cli_command_port, argc, argv, NULL, NULL);

    if (status != CLI_GO_ON)
        return status;
    if (optind >= argc)
        return cli_usage_error(&cli_command_port, "no sandbox id given");
    if (argc - optind > 2)
        return cli_usage_error(&cli_command_port, "unexpected argument \"%s\"", argv[optind + 2]);
    if (argc - optind == 2) {
        const char *arg = argv[optind + 1];
        char *end;

        errno = 0;
        port = strtoul(arg, &end, 10);
        /* docker also takes PORT/tcp */
        if (*end == '/' && strcmp(end, "/tcp") == 0)
            end += 4;
        if (*arg < '0' || *arg > '9' || *end != '\0' || errno != 0 || port < 1 || port > 65535)
            return cli_usage_error(&cli_command_port, "invalid port \"%s\": expected a TCP "
                                   "port number 1..65535 (or PORT/tcp)", arg);
    }
    sandbox = cli_sandbox_open(argv[optind], NULL);
    if (sandbox == NULL)
        return CLI_EXIT_TOOL;
    if (port != 0) {
        char *endpoint = sbx_sandbox_resolve_port(sandbox, (unsigned)port, &error);

        if (endpoint == NULL) {
            cli_error(error);
            status = CLI_EXIT_TOOL;
        } else {
            printf("%s\n", endpoint);
            free(endpoint);
            status = 0;
        }
    } else {
        uint16_t *ports = NULL;
        size_t n = 0;

        status = 0;
        if (sbx_sandbox_list_ports(sandbox, &ports, &n, &error) < 0) {
            cli_error(error);
            status = CLI_EXIT_TOOL;
        }
        for (size_t i = 0; i < n && status == 0; i++) {
            char *endpoint = sbx_sandbox_resolve_port(sandbox, ports[i], &error);

            if (endpoint == NULL) {
                cli_error(error);
                error = NULL;
                status = CLI_EXIT_TOOL;
                break;
            }
            printf("%u/tcp -> %s\n", (unsigned)ports[i], endpoint);
            free(endpoint);
        }
        free(ports);
    }
    sbx_sandbox_free(sandbox);
    if (status == 0)
        status = cli_flush("the ports");
    return status;
}

const cli_command cli_command_port = {
    "port", "port ID [PORT]", "print where this host reaches the exposed ports of\nsandbox ID",
    port_main, usage
};

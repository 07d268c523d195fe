/*
 * sbx costs: what a control plane (sbx-server) has metered for the
 * organization of the product key, from its GET /v1/costs.
 */
#include <stdlib.h>
#include <string.h>

#ifdef SBX_CLI_HAVE_CURL
#include <curl/curl.h>
#endif

#include "cli.h"

static void usage(FILE *out)
{
    fprintf(out,
"Usage: sbx [--remote URL] costs [--group-by=sandbox|backend|day]\n"
"                               [--since=TIME] [--until=TIME] [--json]\n"
"\n"
"Print the usage and cost a control plane metered for the organization of\n"
"the product key: one row per sandbox, backend or UTC day (sorted by it),\n"
"with runtime seconds, the provider's cost and the customer's cost in USD,\n"
"exactly as the server gives them (decimal strings). The control plane is\n"
"--remote URL (before the command), else $BESPOKE_SANDBOX_URL; the product\n"
"key is $BESPOKE_SANDBOX_KEY (it needs the scope usage:read).\n"
"\n"
"      --group-by=KEY  sandbox (default), backend or day\n"
"      --since=TIME    only what happened at or after TIME (ISO 8601 with a\n"
"                      timezone, e.g. 2026-01-01T00:00:00Z; a bare date\n"
"                      YYYY-MM-DD is its UTC midnight)\n"
"      --until=TIME    only what happened before TIME (the same forms)\n"
"      --json          print the server's answer as JSON\n"
"  -h, --help          show this help and exit\n"
"\n"
"Exit status: 0; 125 when the control plane is not configured, cannot be\n"
"reached or refuses the request (its error is printed).\n");
}

typedef struct costs_opts {
    const char *group_by;
    char *since, *until;
    int json;
} costs_opts;

static int set_group_by(const cli_command *cmd, const char *arg, void *ctx)
{
    if (strcmp(arg, "sandbox") != 0 && strcmp(arg, "backend") != 0 && strcmp(arg, "day") != 0)
        return cli_usage_error(cmd, "invalid --group-by value \"%s\": expected sandbox, "
                               "backend or day", arg);
    ((costs_opts *)ctx)->group_by = arg;
    return CLI_GO_ON;
}

/* A bare date YYYY-MM-DD as its UTC midnight; anything else as given (the
 * server checks it). New string in *@out. */
static int set_time(const cli_command *cmd, const char *option, const char *arg, char **out)
{
    int bare = strlen(arg) == 10 && arg[4] == '-' && arg[7] == '-';
    free(*out);
    if (*arg == '\0')
        return cli_usage_error(cmd, "%s needs a time", option);
    *out = bare ? malloc(strlen(arg) + 11) : strdup(arg);
    if (*out == NULL)
        return cli_out_of_memory();
    if (bare)
        sprintf(*out, "%sT00:00:00Z", arg);
    return CLI_GO_ON;
}

static int set_since(const cli_command *cmd, const char *arg, void *ctx)
{
    return set_time(cmd, "--since", arg, &((costs_opts *)ctx)->since);
}

static int set_until(const cli_command *cmd, const char *arg, void *ctx)
{
    return set_time(cmd, "--until", arg, &((costs_opts *)ctx)->until);
}

#ifdef SBX_CLI_HAVE_CURL
static size_t on_body(char *p, size_t size, size_t n, void *ud)
{
    size_t len = size * n;
    char **buf = ud;
    size_t have = *buf ? strlen(*buf) : 0;
    char *nb = realloc(*buf, have + len + 1);

    if (nb == NULL)
        return 0;
    memcpy(nb + have, p, len);
    nb[have + len] = '\0';
    *buf = nb;
    return len;
}

/* The option of this command that sets query parameter @param of
 * /v1/costs, or NULL. */
static const char *option_of(const char *param)
{
    static const char *const map[][2] = {
        { "start", "--since" }, { "end", "--until" }, { "group_by", "--group-by" },
    };

    for (size_t i = 0; param != NULL && i < sizeof map / sizeof map[0]; i++)
        if (strcmp(param, map[i][0]) == 0)
            return map[i][1];
    return NULL;
}

/* One entry of a validation list ({"loc": ["query", P], "msg", "input"}) as
 * text (new string): "--since \"bad\": MSG" when P is one of our options,
 * else MSG. */
static char *entry_text(json_object *e)
{
    json_object *m = NULL, *loc = NULL, *in = NULL;
    const char *msg = json_object_object_get_ex(e, "msg", &m) ? json_object_get_string(m)
                                                              : "invalid request";
    const char *opt = NULL;
    char *out = NULL;

    if (json_object_object_get_ex(e, "loc", &loc) && json_object_is_type(loc, json_type_array) &&
        json_object_array_length(loc) == 2)
        opt = option_of(json_object_get_string(json_object_array_get_idx(loc, 1)));
    if (opt != NULL && json_object_object_get_ex(e, "input", &in) &&
        json_object_is_type(in, json_type_string)) {
        if (asprintf(&out, "%s \"%s\": %s", opt, json_object_get_string(in), msg) < 0)
            out = NULL;
    } else {
        out = strdup(msg);
    }
    return out;
}

/* The "detail" of an error answer as text (new string): a string as it is
 * (the server's names of --since and --until, start and end, as the
 * options), a list's entries (entry_text()) joined with "; ", else the body
 * itself. */
static char *error_text(const char *body)
{
    static const char *const words[][2] = {
        { "start must be before end", "--since must be before --until" },
        { "start must include a timezone", "--since must include a timezone" },
        { "end must include a timezone", "--until must include a timezone" },
    };
    json_object *j = body ? json_tokener_parse(body) : NULL, *d = NULL;
    char *out = NULL;

    if (j != NULL && json_object_is_type(j, json_type_object))
        json_object_object_get_ex(j, "detail", &d);
    if (d != NULL && json_object_is_type(d, json_type_string)) {
        const char *t = json_object_get_string(d);
        for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
            if (strcmp(t, words[i][0]) == 0)
                t = words[i][1];
        out = strdup(t);
    } else if (d != NULL && json_object_is_type(d, json_type_array)) {
        size_t cap = 1;
        out = calloc(1, 1);
        for (size_t i = 0; out != NULL && i < json_object_array_length(d); i++) {
            char *s = entry_text(json_object_array_get_idx(d, i));
            char *nb = s != NULL ? realloc(out, cap += strlen(s) + 2) : NULL;
            if (nb == NULL) {
                free(s);
                free(out);
                out = NULL;
                break;
            }
            out = nb;
            if (i > 0)
                strcat(out, "; ");
            strcat(out, s);
            free(s);
        }
    } else if (d != NULL) {
        out = strdup(json_object_to_json_string_ext(d, JSON_C_TO_STRING_PLAIN));
    } else {
        out = strdup(body != NULL && *body != '\0' ? body : "no message");
    }
    json_object_put(j);
    return out;
}

/* GET @url with the product key @key: the answer's JSON object in *@doc.
 * Returns 0, or CLI_EXIT_TOOL after reporting. */
static int get_json(const char *url, const char *key, json_object **doc)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    char *auth = malloc(strlen(key) + 32), *body = NULL, err[CURL_ERROR_SIZE] = "";
    long status = 0;
    int rc = CLI_EXIT_TOOL;

    if (h == NULL || auth == NULL) {
        curl_easy_cleanup(h);
        free(auth);
        return cli_out_of_memory();
    }
    sprintf(auth, "Authorization: Bearer %s", key);
    hdrs = curl_slist_append(hdrs, auth);
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &body);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, err);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 120L);
    CURLcode c = curl_easy_perform(h);
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
    if (c != CURLE_OK) {
        cli_msg("costs: the control plane did not answer: %s [code=connection]",
                err[0] ? err : curl_easy_strerror(c));
    } else if (status != 200) {
        char *t = error_text(body);
        cli_msg("costs: the control plane refused: %s (HTTP %ld)", t ? t : "no message", status);
        free(t);
    } else if ((*doc = body ? json_tokener_parse(body) : NULL) == NULL ||
               !json_object_is_type(*doc, json_type_object)) {
        json_object_put(*doc);
        *doc = NULL;
        cli_msg("costs: the control plane's answer is not a JSON object");
    } else {
        rc = 0;
    }
    curl_slist_free_all(hdrs);
    curl_easy_cleanup(h);
    free(auth);
    free(body);
    return rc;
}

#else
static int get_json(const char *url, const char *key, json_object **doc)
{
    (void)url;
    (void)key;
    (void)doc;
    cli_msg("costs: this sbx was built without libcurl [code=feature_not_supported]");
    return CLI_EXIT_TOOL;
}
#define curl_easy_escape(h, s, n) strdup(s)
#define curl_free free
#endif

static const char *member(json_object *o, const char *key)
{
    json_object *v;

    if (!json_object_object_get_ex(o, key, &v) || v == NULL)
        return "-";
    return json_object_get_string(v);
}

static void print_table(json_object *doc)
{
    json_object *items;
    size_t n;

    if (!json_object_object_get_ex(doc, "items", &items) ||
        !json_object_is_type(items, json_type_array))
        return;
    n = json_object_array_length(items);
    printf("%-40s %16s %18s %18s\n", "KEY", "RUNTIME_SECONDS", "PROVIDER_COST_USD",
           "CUSTOMER_COST_USD");
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(items, i);
        char *k = cli_escape_name(member(e, "key"));
        printf("%-40s %16s %18s %18s\n", k ? k : "?", member(e, "runtime_seconds"),
               member(e, "provider_cost_usd"), member(e, "customer_cost_usd"));
        free(k);
    }
}

static int costs_main(int argc, char **argv)
{
    static const cli_option table[] = {
        { "group-by", 0, 1, NULL, set_group_by },
        { "since", 0, 1, NULL, set_since },
        { "until", 0, 1, NULL, set_until },
        { "json", 0, 0, NULL, NULL },
        { NULL, 0, 0, NULL, NULL },
    };
    costs_opts o = { "sandbox", NULL, NULL, 0 };
    cli_option t[sizeof table / sizeof table[0]];
    const char *base = getenv("BESPOKE_SANDBOX_URL"), *key = getenv("BESPOKE_SANDBOX_KEY");
    json_object *doc = NULL;
    char *url = NULL, *s = NULL, *u = NULL;
    int status;

    memcpy(t, table, sizeof table);
    t[3].flag = &o.json;
    status = cli_parse_options_only(&cli_command_costs, argc, argv, t, &o);
    if (status == CLI_GO_ON && (base == NULL || *base == '\0'))
        status = cli_usage_error(&cli_command_costs, "no control plane: give --remote URL "
                                 "before the command, or set BESPOKE_SANDBOX_URL");
    if (status == CLI_GO_ON && (key == NULL || *key == '\0')) {
        cli_msg("costs: no product key: set BESPOKE_SANDBOX_KEY [code=configuration]");
        status = CLI_EXIT_TOOL;
    }
    if (status == CLI_GO_ON) {
        size_t bl = strlen(base);
        while (bl > 0 && base[bl - 1] == '/')
            bl--;
        s = o.since ? curl_easy_escape(NULL, o.since, 0) : NULL;
        u = o.until ? curl_easy_escape(NULL, o.until, 0) : NULL;
        url = malloc(bl + strlen(o.group_by) + (s ? strlen(s) : 0) + (u ? strlen(u) : 0) + 64);
        if (url == NULL || (o.since && !s) || (o.until && !u)) {
            status = cli_out_of_memory();
        } else {
            sprintf(url, "%.*s/v1/costs?group_by=%s%s%s%s%s", (int)bl, base, o.group_by,
                    s ? "&start=" : "", s ? s : "", u ? "&end=" : "", u ? u : "");
            status = get_json(url, key, &doc);
        }
    }
    if (status == 0) {
        if (o.json)
            cli_print_json(doc);
        else {
            print_table(doc);
            json_object_put(doc);
        }
        status = cli_flush("the costs");
    }
    curl_free(s);
    curl_free(u);
    free(url);
    free(o.since);
    free(o.until);
    return status == CLI_GO_ON ? 0 : status;
}

const cli_command cli_command_costs = {
    "costs", "costs [--group-by=KEY] [--since=T] [--until=T] [--json]",
    "a control plane's metered usage and cost (--remote URL)",
    costs_main, usage
};

/*
 * kubeconfig.c — where the kubernetes backend finds its API server and
 * credentials (kubeconfig.h says what is read, in which order, and what
 * is refused).
 */
#include "kubeconfig.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>
#include <yaml.h>

#define KC_MAX_FILE (4u << 20)

void k8_conf_clear(k8_conf *k)
{
    free(k->server);
    free(k->namespace_);
    free(k->context);
    free(k->source);
    cl_buf_clear(&k->ca);
    cl_buf_clear(&k->cert);
    if (k->key.data)
        memset(k->key.data, 0, k->key.len);
    cl_buf_clear(&k->key);
    if (k->token) {
        memset(k->token, 0, strlen(k->token));
        free(k->token);
    }
    memset(k, 0, sizeof(*k));
}

/* Reads the whole file @path into @out: 0, or -1 with errno. */
static int kc_slurp(const char *path, cl_buf *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    char buf[8192];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        if (out->len + n > KC_MAX_FILE || cl_buf_append(out, buf, n) < 0) {
            fclose(f);
            errno = EFBIG;
            return -1;
        }
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        errno = EIO;
        return -1;
    }
    if (!out->data)
        cl_buf_append(out, "", 0);
    return 0;
}

/* A libyaml node as JSON: mappings as objects, sequences as arrays,
 * scalars as strings (a kubeconfig's booleans are read from their text). */
static json_object *kc_node(yaml_document_t *d, yaml_node_t *n, int depth)
{
    if (!n || depth > 64)
        return NULL;
    switch (n->type) {
    case YAML_SCALAR_NODE:
        return json_object_new_string_len((const char *)n->data.scalar.value,
                                          (int)n->data.scalar.length);
    case YAML_SEQUENCE_NODE: {
        json_object *a = json_object_new_array();
        for (yaml_node_item_t *i = n->data.sequence.items.start;
             i < n->data.sequence.items.top; i++)
            json_object_array_add(a, kc_node(d, yaml_document_get_node(d, *i), depth + 1));
        return a;
    }
    case YAML_MAPPING_NODE: {
        json_object *o = json_object_new_object();
        for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top;
             p++) {
            yaml_node_t *k = yaml_document_get_node(d, p->key);
            if (!k || k->type != YAML_SCALAR_NODE)
                continue;
            json_object_object_add(o, (const char *)k->data.scalar.value,
                                   kc_node(d, yaml_document_get_node(d, p->value), depth + 1));
        }
        return o;
    }
    default:
        return NULL;
    }
}

json_object *k8_yaml_parse(const char *text, size_t len, const char *path, sbx_error **error)
{
    yaml_parser_t p;
    yaml_document_t d;
    if (!yaml_parser_initialize(&p)) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, "client_new", "out of memory");
        return NULL;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    if (!yaml_parser_load(&p, &d)) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                           "kubernetes backend: the kubeconfig %s is not YAML: %s at line %zu",
                           path, p.problem ? p.problem : "syntax error",
                           (size_t)p.problem_mark.line + 1), "path", path);
        yaml_parser_delete(&p);
        return NULL;
    }
    json_object *o = kc_node(&d, yaml_document_get_root_node(&d), 0);
    yaml_document_delete(&d);
    yaml_parser_delete(&p);
    if (!o)
        o = json_object_new_object();
    if (!json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                           "kubernetes backend: the kubeconfig %s is not a mapping", path),
                   "path", path);
        return NULL;
    }
    return o;
}

/* The entry named @name of the list @key ("clusters", "users",
 * "contexts") of @kc: its inner object (member @inner), or NULL. */
static json_object *kc_named(json_object *kc, const char *key, const char *inner,
                             const char *name)
{
    json_object *list = NULL;
    if (!json_object_object_get_ex(kc, key, &list) || !json_object_is_type(list, json_type_array))
        return NULL;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        json_object *e = json_object_array_get_idx(list, i);
        const char *n = cl_json_str(e, "name");
        if (n && strcmp(n, name) == 0) {
            json_object *in = NULL;
            return json_object_object_get_ex(e, inner, &in) ? in : json_object_new_object();
        }
    }
    return NULL;
}

/* A path of the kubeconfig @src: relative ones are taken from the file's
 * directory, as kubectl does. A new string. */
static char *kc_path(const char *src, const char *p)
{
    if (p[0] == '/' || !strchr(src, '/'))
        return strdup(p);
    const char *slash = strrchr(src, '/');
    return cl_printf("%.*s/%s", (int)(slash - src), src, p);
}

/* Fills @out with the PEM of field @field (a path) or @field-data (base64)
 * of @o (what: "users[NAME]"): 1 when set, 0 when neither is, -1 with an
 * error naming the bad value. */
static int kc_pem(json_object *o, const char *field, const char *src, const char *what,
                  cl_buf *out, sbx_error **error)
{
    char dkey[64];
    snprintf(dkey, sizeof dkey, "%s-data", field);
    const char *data = cl_json_str(o, dkey), *path = cl_json_str(o, field);
    if (data && *data) {
        if (cl_base64_decode(data, strlen(data), out) < 0 || !out->len) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                               "kubernetes backend: %s.%s in %s is not base64", what, dkey,
                               src), "option", dkey);
            return -1;
        }
        return 1;
    }
    if (path && *path) {
        char *full = kc_path(src, path);
        if (!full || kc_slurp(full, out) < 0) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, "client_new",
                               "kubernetes backend: cannot read %s.%s %s (from %s): %s", what,
                               field, full ? full : path, src, strerror(errno)), "path",
                       full ? full : path);
            free(full);
            return -1;
        }
        free(full);
        return 1;
    }
    return 0;
}

static int kc_bool(json_object *o, const char *key)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v))
        return 0;
    if (json_object_is_type(v, json_type_boolean))
        return json_object_get_boolean(v);
    const char *s = json_object_get_string(v);
    return s && (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "yes") == 0);
}

int k8_conf_from_kubeconfig(json_object *kc, const char *src, const char *want_context,
                            k8_conf *k, sbx_error **error)
{
    const char *op = "client_new";
    const char *ctxname = want_context && *want_context ? want_context
                                                          : cl_json_str(kc, "current-context");
    if (!ctxname || !*ctxname) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: the "
                           "kubeconfig %s has no current-context (set one, or the client "
                           "option \"context\")", src), "path", src);
        return -1;
    }
    json_object *cx = kc_named(kc, "contexts", "context", ctxname);
    if (!cx) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: context "
                           "\"%s\" is not in the kubeconfig %s", ctxname, src), "context",
                   ctxname);
        return -1;
    }
    const char *clname = cl_json_str(cx, "cluster"), *uname = cl_json_str(cx, "user");
    json_object *cl = clname ? kc_named(kc, "clusters", "cluster", clname) : NULL;
    if (!cl) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: cluster "
                           "\"%s\" of context \"%s\" is not in the kubeconfig %s",
                           clname ? clname : "", ctxname, src), "cluster", clname ? clname : "");
        return -1;
    }
    const char *server = cl_json_str(cl, "server");
    if (!server || (strncmp(server, "https://", 8) != 0 && strncmp(server, "http://", 7) != 0)) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: cluster "
                           "\"%s\" has no https:// or http:// server in %s (server: %s)",
                           clname, src, server ? server : "(none)"), "server",
                   server ? server : "");
        return -1;
    }
    k->server = cl_trim_slash(server);
    k->context = strdup(ctxname);
    const char *ns = cl_json_str(cx, "namespace");
    if (ns && *ns)
        k->namespace_ = strdup(ns);
    char what[160];
    snprintf(what, sizeof what, "clusters[%s]", clname);
    if (kc_pem(cl, "certificate-authority", src, what, &k->ca, error) < 0)
        return -1;
    k->insecure = kc_bool(cl, "insecure-skip-tls-verify");
    json_object *u = uname ? kc_named(kc, "users", "user", uname) : NULL;
    if (uname && !u) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: user "
                           "\"%s\" of context \"%s\" is not in the kubeconfig %s", uname,
                           ctxname, src), "user", uname);
        return -1;
    }
    if (u) {
        json_object *x = NULL;
        snprintf(what, sizeof what, "users[%s]", uname);
        if (json_object_object_get_ex(u, "exec", &x) && x) {
            const char *cmd = cl_json_str(x, "command");
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: user "
                               "\"%s\" in %s gets its credential from an exec plugin (%s), "
                               "which this backend does not run; use a kubeconfig with a "
                               "token or a client certificate (e.g. a service account's "
                               "token)", uname, src, cmd ? cmd : "command"), "user", uname);
            return -1;
        }
        if (json_object_object_get_ex(u, "auth-provider", &x) && x) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: user "
                               "\"%s\" in %s uses an auth-provider (%s), which this backend "
                               "does not support; use a token or a client certificate", uname,
                               src, cl_json_str(x, "name") ? cl_json_str(x, "name") : "?"),
                       "user", uname);
            return -1;
        }
        if (cl_json_str(u, "username") || cl_json_str(u, "password")) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: user "
                               "\"%s\" in %s uses basic authentication (username/password), "
                               "which Kubernetes removed; use a token or a client "
                               "certificate", uname, src), "user", uname);
            return -1;
        }
        const char *tok = cl_json_str(u, "token"), *tokfile = cl_json_str(u, "tokenFile");
        if (tok && *tok) {
            k->token = strdup(tok);
        } else if (tokfile && *tokfile) {
            cl_buf t = { 0 };
            char *full = kc_path(src, tokfile);
            if (!full || kc_slurp(full, &t) < 0) {
                cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: "
                                   "cannot read %s.tokenFile %s: %s", what, full ? full
                                                                                : tokfile,
                                   strerror(errno)), "path", full ? full : tokfile);
                free(full);
                cl_buf_clear(&t);
                return -1;
            }
            free(full);
            while (t.len && (t.data[t.len - 1] == '\n' || t.data[t.len - 1] == '\r'))
                t.data[--t.len] = '\0';
            k->token = t.data;
        }
        int hc = kc_pem(u, "client-certificate", src, what, &k->cert, error);
        if (hc < 0)
            return -1;
        int hk = kc_pem(u, "client-key", src, what, &k->key, error);
        if (hk < 0)
            return -1;
        if (hc != hk) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: %s in "
                               "%s has a client-%s without a client-%s", what, src,
                               hc ? "certificate" : "key", hc ? "key" : "certificate"), "user",
                       uname);
            return -1;
        }
    }
    return 0;
}

/* Makes the relative path in member @field of @o absolute, from the
 * directory of the kubeconfig @file (kubectl resolves each file's paths
 * before it merges). */
static void kc_resolve(json_object *o, const char *field, const char *file)
{
    const char *p = cl_json_str(o, field);
    if (!p || !*p || p[0] == '/')
        return;
    char *full = kc_path(file, p);
    if (full)
        json_object_object_add(o, field, json_object_new_string(full));
    free(full);
}

/* Merges the list @key ("clusters", "users", "contexts") of @from into
 * @into: an entry whose name @into has already is left out (the first
 * file to set a name wins). Relative paths in what is taken are resolved
 * from @file. */
static void kc_merge_list(json_object *into, json_object *from, const char *key,
                          const char *inner, const char *file)
{
    json_object *src = NULL, *dst = NULL;
    if (!json_object_object_get_ex(from, key, &src) || !json_object_is_type(src, json_type_array))
        return;
    if (!json_object_object_get_ex(into, key, &dst) || !json_object_is_type(dst, json_type_array)) {
        dst = json_object_new_array();
        json_object_object_add(into, key, dst);
    }
    for (size_t i = 0; i < json_object_array_length(src); i++) {
        json_object *e = json_object_array_get_idx(src, i);
        const char *n = cl_json_str(e, "name");
        if (!n || kc_named(into, key, inner, n))
            continue;
        json_object *in = NULL;
        if (json_object_object_get_ex(e, inner, &in) && json_object_is_type(in, json_type_object)) {
            kc_resolve(in, "certificate-authority", file);
            kc_resolve(in, "client-certificate", file);
            kc_resolve(in, "client-key", file);
            kc_resolve(in, "tokenFile", file);
        }
        json_object_array_add(dst, json_object_get(e));
    }
}

/*
 * KUBECONFIG=@env, a colon-separated list of files, merged as kubectl
 * merges them (client-go's ClientConfigLoadingRules.Load): files that do
 * not exist are passed over, a path listed twice is read once; each
 * cluster, user and context is taken from the first file that names it;
 * current-context from the first file that sets it; relative paths are
 * resolved from the directory of the file they are in. The merged
 * kubeconfig, with *@src the files read joined by ':' (a new string), or
 * NULL with a configuration error naming the file that cannot be read or
 * parsed, or KUBECONFIG when none of its files exists.
 */
json_object *k8_kubeconfig_merge(const char *env, char **src, sbx_error **error)
{
    const char *op = "client_new";
    char *copy = strdup(env), *save = NULL;
    json_object *merged = json_object_new_object(), *seen = json_object_new_object();
    cl_buf names = { 0 };
    int nread = 0;
    *src = NULL;
    if (!copy || !merged || !seen) {
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
        goto fail;
    }
    for (char *t = strtok_r(copy, ":", &save); t; t = strtok_r(NULL, ":", &save)) {
        if (!*t || access(t, F_OK) != 0)
            continue;
        if (json_object_object_get_ex(seen, t, NULL))
            continue;
        json_object_object_add(seen, t, NULL);
        cl_buf text = { 0 };
        if (kc_slurp(t, &text) < 0) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: cannot "
                               "read the kubeconfig %s (of KUBECONFIG): %s", t,
                               strerror(errno)), "path", t);
            cl_buf_clear(&text);
            goto fail;
        }
        json_object *kc = k8_yaml_parse(text.data, text.len, t, error);
        cl_buf_clear(&text);
        if (!kc)
            goto fail;
        const char *cur = cl_json_str(merged, "current-context"),
                   *fcur = cl_json_str(kc, "current-context");
        if ((!cur || !*cur) && fcur && *fcur)
            json_object_object_add(merged, "current-context", json_object_new_string(fcur));
        kc_merge_list(merged, kc, "clusters", "cluster", t);
        kc_merge_list(merged, kc, "users", "user", t);
        kc_merge_list(merged, kc, "contexts", "context", t);
        json_object_put(kc);
        if ((nread++ && cl_buf_append(&names, ":", 1) < 0)
            || cl_buf_append(&names, t, strlen(t)) < 0) {
            cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
            goto fail;
        }
    }
    if (!nread) {
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: no file "
                           "of KUBECONFIG=%s exists", env), "path", env);
        goto fail;
    }
    free(copy);
    json_object_put(seen);
    *src = names.data;
    return merged;
fail:
    free(copy);
    json_object_put(seen);
    cl_buf_clear(&names);
    json_object_put(merged);
    return NULL;
}

int k8_conf_load(json_object *cfg, k8_conf *k, sbx_error **error)
{
    const char *op = "client_new";
    const char *path = cl_json_str(cfg, "kubeconfig");
    const char *want_ctx = cl_json_str(cfg, "context");
    char *found = NULL;
    int in_cluster = 0;
    json_object *v = NULL;
    if (cfg && json_object_object_get_ex(cfg, "in_cluster", &v))
        in_cluster = json_object_get_boolean(v);
    if (!path && !in_cluster) {
        const char *env = getenv("KUBECONFIG");
        if (env && *env) {
            char *src = NULL;
            json_object *kc = k8_kubeconfig_merge(env, &src, error);
            int rc = kc ? k8_conf_from_kubeconfig(kc, src, want_ctx, k, error) : -1;
            json_object_put(kc);
            if (rc == 0)
                k->source = src;
            else
                free(src);
            return rc;
        } else if (!getenv("KUBERNETES_SERVICE_HOST")) {
            const char *home = getenv("HOME");
            if (home && *home) {
                char *p = cl_printf("%s/.kube/config", home);
                if (p && access(p, F_OK) == 0)
                    found = p;
                else
                    free(p);
            }
        }
        path = found;
    }
    if (path) {
        cl_buf text = { 0 };
        if (kc_slurp(path, &text) < 0) {
            cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: cannot "
                               "read the kubeconfig %s: %s", path, strerror(errno)), "path",
                       path);
            free(found);
            return -1;
        }
        json_object *kc = k8_yaml_parse(text.data, text.len, path, error);
        cl_buf_clear(&text);
        int rc = kc ? k8_conf_from_kubeconfig(kc, path, want_ctx, k, error) : -1;
        json_object_put(kc);
        if (rc == 0)
            k->source = strdup(path);
        free(found);
        return rc;
    }
    /* In-cluster: the service account's token and CA, the API server
     * from KUBERNETES_SERVICE_HOST/_PORT (client-go's rest.InClusterConfig). */
    const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
    const char *sa = getenv("SBX_K8S_SERVICEACCOUNT_DIR");
    if (!sa || !*sa)
        sa = K8_SA_DIR;
    if (!host || !*host) {
        cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: no kubeconfig (set "
                "KUBECONFIG, or make ~/.kube/config) and not in a cluster "
                "(KUBERNETES_SERVICE_HOST is unset)");
        return -1;
    }
    k->server = strchr(host, ':') ? cl_printf("https://[%s]:%s", host, port ? port : "443")
                                  : cl_printf("https://%s:%s", host, port ? port : "443");
    char *tp = cl_printf("%s/token", sa), *cp = cl_printf("%s/ca.crt", sa),
         *np = cl_printf("%s/namespace", sa);
    cl_buf t = { 0 }, n = { 0 };
    int rc = -1;
    if (!tp || !cp || !np)
        cl_fail(error, SBX_ERROR_RESOURCE_EXHAUSTED, op, "out of memory");
    else if (kc_slurp(tp, &t) < 0)
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: in a "
                           "cluster, but the service account token %s cannot be read: %s", tp,
                           strerror(errno)), "path", tp);
    else if (kc_slurp(cp, &k->ca) < 0)
        cl_context(cl_fail(error, SBX_ERROR_CONFIGURATION, op, "kubernetes backend: in a "
                           "cluster, but the service account CA %s cannot be read: %s", cp,
                           strerror(errno)), "path", cp);
    else {
        while (t.len && (t.data[t.len - 1] == '\n' || t.data[t.len - 1] == '\r'))
            t.data[--t.len] = '\0';
        k->token = t.data;
        t.data = NULL;
        if (kc_slurp(np, &n) == 0 && n.len) {
            while (n.len && (n.data[n.len - 1] == '\n' || n.data[n.len - 1] == ' '))
                n.data[--n.len] = '\0';
            k->namespace_ = n.data;
            n.data = NULL;
        }
        k->source = strdup("in-cluster service account");
        rc = 0;
    }
    cl_buf_clear(&t);
    cl_buf_clear(&n);
    free(tp);
    free(cp);
    free(np);
    return rc;
}

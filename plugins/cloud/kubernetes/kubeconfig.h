/*
 * kubeconfig.h — the API server and credentials of the kubernetes backend.
 *
 * Order (client-go's loading rules, reduced):
 *  1. the client option "kubeconfig" (a path);
 *  2. KUBECONFIG: a colon-separated list of files, merged as kubectl
 *     merges them (k8_kubeconfig_merge());
 *  3. ~/.kube/config, unless KUBERNETES_SERVICE_HOST is set;
 *  4. in-cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
 *     with the service account's token, ca.crt and namespace from
 *     /var/run/secrets/kubernetes.io/serviceaccount (the client option
 *     "in_cluster": true chooses it first).
 * From a kubeconfig: the context named by the client option "context",
 * else current-context; its cluster's server, certificate-authority(-data)
 * and insecure-skip-tls-verify; its user's token or tokenFile and
 * client-certificate(-data) with client-key(-data); its namespace. A user
 * whose credential comes from an exec plugin or an auth-provider, or basic
 * authentication, is refused with a configuration error naming the user
 * and the file (the plugin runs no programs to get credentials). Every
 * other bad value (a context, cluster or user that is not there, a server
 * that is not http(s)://, base64 that does not decode, a file that cannot
 * be read) is a configuration error naming it.
 *
 * Secrets (the token, the client key) are never logged nor put in an
 * error; k8_conf_clear() wipes them.
 */
#ifndef SBX_K8S_KUBECONFIG_H
#define SBX_K8S_KUBECONFIG_H

#include "cloud.h"
#include "provider.h"

#define K8_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

typedef struct k8_conf {
    char *server;       /* https://HOST[:PORT], no trailing slash */
    char *namespace_;   /* the context's namespace, or NULL */
    char *context;      /* the context used, or NULL in-cluster */
    char *source;       /* the file read, or "in-cluster service account" */
    cl_buf ca;          /* PEM; empty: the system's CAs */
    cl_buf cert, key;   /* client certificate and key (PEM), or empty */
    char *token;        /* bearer token, or NULL */
    int insecure;       /* insecure-skip-tls-verify */
} k8_conf;

/** Loads @k (zeroed by the caller) by the order above; @cfg is the
 *  client's option object (may be NULL). 0, or -1 with a configuration
 *  error naming the bad value (op client_new). */
int k8_conf_load(struct json_object *cfg, k8_conf *k, sbx_error **error);

/** Fills @k from the parsed kubeconfig @kc (read from @src, for messages
 *  and relative paths), context @want_context or current-context. */
int k8_conf_from_kubeconfig(struct json_object *kc, const char *src, const char *want_context,
                            k8_conf *k, sbx_error **error);

/**
 * KUBECONFIG=@env, a colon-separated list of files, merged as kubectl
 * merges them (client-go's ClientConfigLoadingRules.Load): files that do
 * not exist are passed over and a path listed twice is read once; each
 * cluster, user and context comes from the first file that names it, and
 * current-context from the first file that sets it; relative paths are
 * resolved from the directory of their own file. A new object (the merged
 * kubeconfig) with *@src the files read, joined by ':' (a new string); or
 * NULL with a configuration error naming the file that cannot be read or
 * is not YAML, or KUBECONFIG when none of its files exists.
 */
struct json_object *k8_kubeconfig_merge(const char *env, char **src, sbx_error **error);

/** YAML text (@len bytes) as a JSON object (mappings, sequences, strings):
 *  a new object, or NULL with a configuration error naming @path and the
 *  line. */
struct json_object *k8_yaml_parse(const char *text, size_t len, const char *path,
                                  sbx_error **error);

void k8_conf_clear(k8_conf *k);

#endif

/* detd error codes: messages and names generated from DETD_ERRNO_MAP. */
#define _GNU_SOURCE
#include "detd/error.h"

#include <string.h>

const char *detd_strerror(int err) {
    switch (err) {
    case 0:
        return "success";
#define DETD_ERR_MSG_(name, value, msg)                                        \
    case value:                                                                \
        return msg;
        DETD_ERRNO_MAP(DETD_ERR_MSG_)
#undef DETD_ERR_MSG_
    default:
        break;
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

const char *detd_err_name(int err) {
    switch (err) {
    case 0:
        return "OK";
#define DETD_ERR_NAME_(name, value, msg)                                       \
    case value:                                                                \
        return "DETD_" #name;
        DETD_ERRNO_MAP(DETD_ERR_NAME_)
#undef DETD_ERR_NAME_
    default:
        break;
    }
    if (err < 0 && err > -4096) {
        const char *n = strerrorname_np(-err);
        if (n != NULL)
            return n;
    }
    return "UNKNOWN";
}

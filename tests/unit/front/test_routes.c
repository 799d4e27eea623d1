/* Unit tests of the route table (src/front/http_routes.c; white-box: it
 * links the daemon's code, core_dep): every path has rows, each method is
 * served by one row or refused with the path's methods in Allow, each row
 * asks the right it should, and a force release's form finds its row only. */
#include <criterion/criterion.h>
#include <string.h>

#include "front/http_int.h"

static const http_route *find(enum api_route p, const char *method, bool force, char *allow)
{
    return http_route_find(p, http_method_bit(method), force, allow, 64);
}

Test(routes, every_path_has_rows)
{
    for (int p = ROUTE_NOT_FOUND + 1; p <= ROUTE_UI_STATE; p++)
        cr_assert(http_route_known((enum api_route)p), "route %d has no row", p);
    cr_assert_not(http_route_known(ROUTE_NOT_FOUND));
}

Test(routes, methods_and_allow)
{
    char allow[64];
    cr_assert(find(ROUTE_LOCK, "PATCH", false, allow));
    cr_assert_null(find(ROUTE_LOCK, "PUT", false, allow));
    cr_assert_str_eq(allow, "GET, POST, PATCH, DELETE");
    cr_assert_null(find(ROUTE_HEALTHZ, "POST", false, allow));
    cr_assert_str_eq(allow, "GET, HEAD");
    cr_assert(find(ROUTE_HEALTHZ, "HEAD", false, allow));
    cr_assert_null(find(ROUTE_ELECTION, "PATCH", false, allow));
    cr_assert_str_eq(allow, "GET, POST, DELETE");
    cr_assert_null(find(ROUTE_ELECTION_VALUE, "GET", false, allow));
    cr_assert_str_eq(allow, "PUT");
    cr_assert_null(find(ROUTE_DAPR_METADATA, "HEAD", false, allow));
    cr_assert_str_eq(allow, "GET");
    cr_assert_null(find(ROUTE_LOCK, "OPTIONS", false, allow), "a method the table does not know");
}

Test(routes, rights)
{
    char allow[64];
    cr_assert_eq(find(ROUTE_LOCK, "GET", false, allow)->right, RIGHT_READ);
    cr_assert_eq(find(ROUTE_LOCK, "POST", false, allow)->right, RIGHT_LOCK);
    cr_assert_eq(find(ROUTE_LOCK, "DELETE", false, allow)->right, RIGHT_LOCK);
    cr_assert_eq(find(ROUTE_LOCK, "DELETE", true, allow)->right, RIGHT_ADMIN);
    cr_assert_eq(find(ROUTE_SEMAPHORE, "DELETE", true, allow)->right, RIGHT_ADMIN);
    cr_assert_eq(find(ROUTE_ELECTION, "DELETE", true, allow)->right, RIGHT_ADMIN);
    cr_assert_eq(find(ROUTE_LIST_LOCKS, "GET", false, allow)->right, RIGHT_READ);
    cr_assert_eq(find(ROUTE_UI_STATE, "GET", false, allow)->right, RIGHT_READ);
    cr_assert_eq(find(ROUTE_HEARTBEAT, "PUT", false, allow)->right, RIGHT_LOCK);
    cr_assert_eq(find(ROUTE_DAPR_LOCK, "POST", false, allow)->auth, AUTH_DAPR);
    cr_assert_eq(find(ROUTE_HEALTHZ, "GET", false, allow)->right, RIGHT_NONE);
    cr_assert_eq(find(ROUTE_UI, "GET", false, allow)->right, RIGHT_NONE);
}

Test(routes, a_force_release_finds_its_row_only)
{
    char allow[64];
    cr_assert_null(find(ROUTE_LOCK, "GET", true, allow), "the query form serves DELETE only");
    cr_assert_str_eq(allow, "DELETE");
    cr_assert_null(find(ROUTE_HEALTHZ, "DELETE", true, allow));
    const http_route *r = find(ROUTE_LOCK, "DELETE", false, allow);
    cr_assert(r && !r->force);
}

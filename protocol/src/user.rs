//! How the parts of breakdance name a user in what they say: the library's
//! refusals of a directory or socket another user owns, and profiler-ctl's
//! refusals of a socket another user serves, use the same words.

/// "name (uid N)", or "uid N" when the user database has no such user.
/// Not for signal handlers: getpwuid_r may load NSS modules.
pub fn describe_user(uid: u32) -> String {
    // SAFETY: passwd is plain data; zero is a valid value.
    let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
    let mut found: *mut libc::passwd = std::ptr::null_mut();
    let mut buffer = [0 as libc::c_char; 1024];
    // SAFETY: every pointer is valid for the sizes given; the name is read
    // only when getpwuid_r says it filled `entry`.
    let name = unsafe {
        let ret = libc::getpwuid_r(
            uid,
            &mut entry,
            buffer.as_mut_ptr(),
            buffer.len(),
            &mut found,
        );
        (ret == 0 && !found.is_null() && !entry.pw_name.is_null()).then(|| {
            std::ffi::CStr::from_ptr(entry.pw_name)
                .to_string_lossy()
                .into_owned()
        })
    };
    match name {
        Some(name) => format!("{name} (uid {uid})"),
        None => format!("uid {uid}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_by_name_and_uid_or_uid_alone() {
        assert_eq!(describe_user(0), "root (uid 0)");
        assert_eq!(describe_user(3_999_999_999), "uid 3999999999");
    }
}

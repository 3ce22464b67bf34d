// The phone menu: a real button (Tab reaches it; Enter and Space open it; Escape closes it).
(function () {
  var button = document.querySelector('.tt-menu-button');
  var body = document.body;
  function set(open) {
    body.classList.toggle('tt-menu-open', open);
    button.setAttribute('aria-expanded', open ? 'true' : 'false');
  }
  button.addEventListener('click', function () {
    set(!body.classList.contains('tt-menu-open'));
  });
  document.addEventListener('keydown', function (event) {
    if (event.key === 'Escape' && body.classList.contains('tt-menu-open')) {
      set(false);
      button.focus();
    }
  });
  // The sidebar scrolls by itself: bring this page's entry into view.
  var nav = document.querySelector('.tt-sidebar');
  var current = nav && nav.querySelector('[aria-current="page"]');
  if (current && nav.scrollHeight > nav.clientHeight) {
    var top = current.getBoundingClientRect().top - nav.getBoundingClientRect().top;
    nav.scrollTop += top - nav.clientHeight / 3;
  }
})();
